"""figures/marker_phases.py: time per phase name over the run, its spread over the ranks,
and the energy of the ranks' devices during it.

Synthetic, format-exact run directories (tests/telemetry_fixtures.py); expected figures
are computed from the spec the fixture wrote, never typed in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.telemetry.report import build_report

PHASES = ("forward", "backward", "optimizer")


def test_each_phase_name_has_its_time_spread_and_energy(tmp_path: Path) -> None:
    """Node 1 holds two ranks on two GPUs, node 2 one rank without a GPU (its host's
    share); rank 1 enters backward late every step."""
    spec = RunSpec(
        nodes=[NodeSpec("node1", gpus=2), NodeSpec("node2", gpus=0, ranks=1)],
        steps=8,
        barrier_every=0,
        phases=PHASES,
        late_rank=1,
    )
    report = build_report(build_run(tmp_path, spec).run_dir)
    found = {p.name: p for p in report.marker_phases}
    assert list(found) == list(PHASES)
    part_s = spec.step_s / len(PHASES)
    for name in ("forward", "optimizer"):
        phase = found[name]
        assert (phase.count, phase.ranks) == (3 * spec.steps, 3)
        assert phase.median_rank_s == pytest.approx(part_s * spec.steps)
        assert phase.total_s == pytest.approx(3 * part_s * spec.steps)
        assert phase.slowest_rank == 0  # all alike: the lowest rank
    backward = found["backward"]
    late_s = (part_s - spec.late_s) * spec.steps
    assert backward.max_rank_s == pytest.approx(part_s * spec.steps)
    assert backward.median_rank_s == pytest.approx(part_s * spec.steps)
    assert backward.total_s == pytest.approx(2 * part_s * spec.steps + late_s)
    assert backward.slowest_rank == 0
    # All phases lie inside the steps, where every device is busy: GPU 0 at busy_w,
    # GPU 1 at busy_w + 10 W, and the host (one rank without a GPU: all of it).
    gpu0, gpu1, host = spec.gpu_busy_w, spec.gpu_busy_w + 10, spec.host_busy_w
    expected_j = (gpu0 + host) * part_s * spec.steps + gpu1 * late_s
    assert backward.energy_j == pytest.approx(expected_j, rel=1e-5)
    assert found["forward"].energy_j == pytest.approx(
        (gpu0 + gpu1 + host) * part_s * spec.steps, rel=1e-5
    )


def test_a_run_without_phase_markers_has_none(tmp_path: Path) -> None:
    report = build_report(build_run(tmp_path, RunSpec(nodes=[NodeSpec("n1")], steps=3)).run_dir)
    assert report.marker_phases == [] and report.timeline.phases is None
