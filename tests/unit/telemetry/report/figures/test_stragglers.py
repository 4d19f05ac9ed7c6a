"""figures/stragglers.py: who arrives last at the barriers, and the energy others burn waiting.

Synthetic, format-exact run directories (tests/telemetry_fixtures.py); expected figures
are computed from the samples the fixture wrote, never typed in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from telemetry_fixtures import NodeSpec, RunSpec, build_run, gpu_uuid

from toolkit.telemetry.report import build_report, format_summary, summary_dict


def test_a_straggler_is_named_with_the_energy_the_others_burn_waiting(tmp_path: Path) -> None:
    spec = RunSpec(
        nodes=[NodeSpec("node1", gpus=2), NodeSpec("node2", gpus=2, offset_s=-2.0)],
        straggler_rank=3,
    )
    fixture = build_run(tmp_path, spec)
    report = build_report(fixture.run_dir)
    found = report.stragglers
    assert found is not None
    barriers = spec.steps // spec.barrier_every
    assert found.barriers == barriers
    slowest = found.slowest
    assert slowest is not None and (slowest.rank, slowest.node) == (3, "node2")
    assert slowest.last == barriers and found.last_by_node == {"node2": barriers}
    by_rank = {r.rank: r for r in found.ranks}
    waited_s = spec.barrier_s * barriers
    # Each waiting GPU idles through the barrier: its idle power for every second waited.
    expected_j = {0: spec.gpu_idle_w, 1: spec.gpu_idle_w + 5, 2: spec.gpu_idle_w, 3: None}
    for rank, idle_w in expected_j.items():
        if idle_w is None:
            assert by_rank[rank].wait_s == 0.0
            assert by_rank[rank].wait_energy_j == pytest.approx(0.0, abs=1e-9)
            continue
        assert by_rank[rank].wait_s == pytest.approx(waited_s)
        assert by_rank[rank].wait_energy_j == pytest.approx(idle_w * waited_s, rel=1e-5)
        assert by_rank[rank].device == gpu_uuid(rank // 2, rank % 2)
    assert found.wait_energy_j == pytest.approx((3 * spec.gpu_idle_w + 5) * waited_s, rel=1e-5)
    assert found.share == pytest.approx(found.wait_energy_j / report.run.energy_j)
    text = format_summary(report)
    assert f"rank 3 on node2 ({barriers} of {barriers})" in text
    stragglers = summary_dict(report)["stragglers"]
    assert stragglers["slowest_rank"] == 3 and len(stragglers["ranks"]) == 4


def test_ranks_without_a_gpu_share_their_hosts_waiting_energy(tmp_path: Path) -> None:
    spec = RunSpec(
        nodes=[NodeSpec("cpu1", gpus=0, ranks=2), NodeSpec("cpu2", gpus=0, ranks=2)],
        straggler_rank=0,
    )
    report = build_report(build_run(tmp_path, spec).run_dir)
    found = report.stragglers
    assert found is not None and found.slowest is not None and found.slowest.rank == 0
    barriers = spec.steps // spec.barrier_every
    by_rank = {r.rank: r for r in found.ranks}
    for rank in (1, 2, 3):
        assert by_rank[rank].device == "host"
        # Two ranks per host: each counts half of the host's idle power while it waits.
        assert by_rank[rank].wait_energy_j == pytest.approx(
            spec.host_idle_w / 2 * spec.barrier_s * barriers, rel=1e-5
        )
