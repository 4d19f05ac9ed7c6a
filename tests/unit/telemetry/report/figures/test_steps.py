"""figures/steps.py: energy per step and per phase, and the run's figures.

Synthetic, format-exact run directories (tests/telemetry_fixtures.py); expected figures
are computed from the samples the fixture wrote, never typed in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from telemetry_fixtures import BuiltRun, NodeSpec, RunSpec, build_run

from toolkit.telemetry.report import Report, build_report


def built(tmp_path: Path, *nodes: NodeSpec, **run: object) -> tuple[BuiltRun, Report]:
    fixture = build_run(tmp_path, RunSpec(nodes=list(nodes), **run))  # type: ignore[arg-type]
    return fixture, build_report(fixture.run_dir)


def test_per_step_energy_and_phases(tmp_path: Path) -> None:
    fixture, report = built(tmp_path, NodeSpec("node1", gpus=2), NodeSpec("node2", gpus=1))
    assert [s.step for s in report.steps] == list(range(1, fixture.spec.steps + 1))
    for step in report.steps:
        begin, end = fixture.steps[step.step]
        assert (step.start_s, step.end_s) == pytest.approx((begin, end))
        # Every device's counter: the GPUs', and the CPU model's integral of its power.
        expected = sum(t.counter_delta_j(begin, end) for t in fixture.devices.values())
        assert step.energy_j == pytest.approx(expected, rel=1e-9)
        assert step.complete
    values = np.array([s.energy_j for s in report.steps])
    stats = report.step_stats
    assert stats is not None and stats.steps == len(values) and stats.incomplete == 0
    p10, median, p90 = np.percentile(values, [10, 50, 90])
    assert (stats.p10_j, stats.median_j, stats.p90_j) == pytest.approx((p10, median, p90))
    # Phases between barriers (the one after step 20 is the window's end); they add up.
    assert [p.label for p in report.phases] == [
        "start - barrier 5",
        "barrier 5 - barrier 10",
        "barrier 10 - barrier 15",
        "barrier 15 - end",
    ]
    assert sum(p.energy_j for p in report.phases) == pytest.approx(report.run.energy_j)
    assert [p.steps for p in report.phases] == [5, 5, 5, 5]
    assert all(p.complete for p in report.phases)


def test_run_figures_tokens_per_joule(tmp_path: Path) -> None:
    fixture, report = built(tmp_path, NodeSpec("node1", gpus=2), NodeSpec("node2", gpus=2))
    run = report.run
    start, end = fixture.window_s
    assert run.steps == fixture.spec.steps
    assert run.tokens == fixture.tokens
    assert run.ranks == 4
    assert run.energy_per_step_j == pytest.approx(run.energy_j / run.steps)
    assert run.energy_per_token_j == pytest.approx(run.energy_j / fixture.tokens)
    assert run.tokens_per_j == pytest.approx(fixture.tokens / run.energy_j)
    assert run.tokens_per_s == pytest.approx(fixture.tokens / (end - start))
    assert run.duration_s == pytest.approx(end - start)


def test_tokens_from_markers_without_metrics(tmp_path: Path) -> None:
    fixture, report = built(tmp_path, NodeSpec("node1", gpus=2), metrics=False)
    assert report.run.tokens == fixture.tokens
