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


PHASES = ("forward", "backward", "optimizer")


def test_a_rank_entering_backward_late_is_named_without_any_barrier(tmp_path: Path) -> None:
    """Three ranks, no barrier records: rank 2 enters backward late_s late every step,
    all leave it together (the all-reduce); the others wait late_s at each step's
    collective, their GPUs busy meanwhile."""
    spec = RunSpec(
        nodes=[NodeSpec(f"node{i}", gpus=1) for i in range(1, 4)],
        steps=10,
        barrier_every=0,
        phases=PHASES,
        late_rank=2,
    )
    report = build_report(build_run(tmp_path, spec).run_dir)
    found = report.stragglers
    assert found is not None and found.sources == ("backward",)
    assert found.barriers == found.from_backward == spec.steps
    slowest = found.slowest
    assert slowest is not None and (slowest.rank, slowest.node) == (2, "node3")
    assert slowest.last == spec.steps and slowest.wait_s == pytest.approx(0.0, abs=1e-6)
    waited_s = spec.late_s * spec.steps
    for rank in (0, 1):
        waits = found.ranks[rank]
        assert waits.wait_s == pytest.approx(waited_s, rel=1e-6)
        # Inside backward the GPU is busy: its busy power for every second waited.
        assert waits.wait_energy_j == pytest.approx(spec.gpu_busy_w * waited_s, rel=1e-5)
        assert waits.device == gpu_uuid(rank, 0)
    stragglers = summary_dict(report)["stragglers"]
    assert stragglers["source"] == "backward" and stragglers["backward_steps"] == spec.steps
    assert stragglers["slowest_rank"] == 2
    text = format_summary(report)
    assert f"step collectives (from backward phases): {spec.steps}," in text
    assert f"rank 2 on node3 ({spec.steps} of {spec.steps})" in text


def test_steps_with_barriers_use_them_and_the_others_their_backward_phases(
    tmp_path: Path,
) -> None:
    spec = RunSpec(
        nodes=[NodeSpec(f"node{i}", gpus=1) for i in range(1, 4)],
        steps=10,
        barrier_every=5,
        phases=PHASES,
        late_rank=1,
        straggler_rank=0,
    )
    report = build_report(build_run(tmp_path, spec).run_dir)
    found = report.stragglers
    assert found is not None and found.sources == ("barriers", "backward")
    barriers = spec.steps // spec.barrier_every
    assert found.barriers == spec.steps and found.from_backward == spec.steps - barriers
    by_rank = {r.rank: r for r in found.ranks}
    collectives_s = spec.late_s * (spec.steps - barriers)
    # Rank 0 comes last to the barriers (waits 0 s there), rank 1 to the other steps'
    # collectives; each waits where the other is late.
    assert by_rank[0].last == barriers and by_rank[1].last == spec.steps - barriers
    assert by_rank[0].wait_s == pytest.approx(collectives_s, rel=1e-6)
    assert by_rank[1].wait_s == pytest.approx(spec.barrier_s * barriers, rel=1e-6)
    assert by_rank[2].wait_s == pytest.approx(collectives_s + spec.barrier_s * barriers)
    stragglers = summary_dict(report)["stragglers"]
    assert stragglers["source"] == "barriers+backward"
    assert stragglers["backward_steps"] == spec.steps - barriers
    text = format_summary(report)
    assert f"barriers: {barriers}, step collectives (from backward phases): 8" in text
