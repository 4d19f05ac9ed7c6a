"""figures/crosscheck.py: the energy counter against integrated power, window by window.

Synthetic, format-exact run directories (tests/telemetry_fixtures.py); expected figures
are computed from the samples the fixture wrote, never typed in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from telemetry_fixtures import BuiltRun, NodeSpec, RunSpec, build_run, gpu_uuid

from toolkit.telemetry.report import Report, build_report


def built(tmp_path: Path, *nodes: NodeSpec, **run: object) -> tuple[BuiltRun, Report]:
    fixture = build_run(tmp_path, RunSpec(nodes=list(nodes), **run))  # type: ignore[arg-type]
    return fixture, build_report(fixture.run_dir)


def test_counter_and_power_disagreement_is_flagged(tmp_path: Path) -> None:
    # Barriers at steps 5, 10, 15, 20; the counter overcounts by 30% between 10 and 15.
    probe = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1")]), name="probe")
    t10, t15 = (probe.barriers[s] - probe.window_s[0] for s in (10, 15))
    fixture, report = built(
        tmp_path,
        NodeSpec("node1", gpus=1),
        NodeSpec("node2", gpus=1, counter_scale=1.3, counter_scale_between=(t10, t15)),
    )
    clean, off = report.cross_checks
    assert (clean.node, off.node) == ("node1", "node2")
    assert clean.basis == off.basis == "barriers"
    assert len(clean.windows) == len(off.windows) == 3
    assert not clean.flagged and clean.ratio == pytest.approx(1.0, abs=0.02)
    [flagged] = off.flagged
    assert (flagged.start_s, flagged.end_s) == pytest.approx(
        (fixture.barriers[10], fixture.barriers[15])
    )
    assert flagged.ratio == pytest.approx(1 / 1.3, rel=0.02)
    truth = fixture.devices[("node2", gpu_uuid(1, 0))]
    assert flagged.counter_j == pytest.approx(
        truth.counter_delta_j(flagged.start_s, flagged.end_s), rel=1e-9
    )
    assert flagged.power_j == pytest.approx(
        truth.trapezoid_j(flagged.start_s, flagged.end_s), rel=1e-9
    )
    assert off.ratio == pytest.approx(off.power_j / off.counter_j)
    assert any("node2" in n and "15%" in n for n in report.notes)


def test_cross_check_uses_fixed_windows_without_barriers(tmp_path: Path) -> None:
    _, report = built(tmp_path, NodeSpec("node1", gpus=1), barrier_every=0, steps=40)
    [check] = report.cross_checks
    assert check.basis == "10 s windows"
    start, end = report.window.start_s, report.window.end_s  # 23.9 s
    edges = [t for w in check.windows for t in (w.start_s, w.end_s)]
    assert edges == pytest.approx([start, start + 10, start + 10, start + 20, start + 20, end])
    assert not report.phases


def test_faster_power_readings_are_used(tmp_path: Path) -> None:
    fixture, report = built(tmp_path, NodeSpec("node1", gpus=1), power_rate_hz=20.0)
    truth = fixture.devices[("node1", gpu_uuid(0, 0))]
    assert truth.power_t_s.size > 1.9 * truth.counter_t_s.size
    [check] = report.cross_checks
    start, end = check.windows[0].start_s, check.windows[0].end_s
    assert check.windows[0].power_j == pytest.approx(truth.trapezoid_j(start, end), rel=1e-9)
