"""inputs/marker_summary.py: every rank's markers reduced; a resumed run's latest attempt.

Synthetic, format-exact run directories (tests/telemetry_fixtures.py); expected figures
are computed from the samples the fixture wrote, never typed in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from telemetry_fixtures import T0_WALL_S, BuiltRun, NodeSpec, RunSpec, build_run

from toolkit.telemetry.report import Report, build_report, format_summary, summary_dict


def built(tmp_path: Path, *nodes: NodeSpec, **run: object) -> tuple[BuiltRun, Report]:
    fixture = build_run(tmp_path, RunSpec(nodes=list(nodes), **run))  # type: ignore[arg-type]
    return fixture, build_report(fixture.run_dir)


def test_restart_uses_the_latest_attempt(tmp_path: Path) -> None:
    fixture, report = built(
        tmp_path, NodeSpec("node1", gpus=1), NodeSpec("node2"), restart_after=7, resume_from=5
    )
    assert fixture.crash_s is not None
    assert [s.step for s in report.steps] == list(range(1, 21))
    for step in report.steps:
        assert (step.start_s, step.end_s) == pytest.approx(fixture.steps[step.step])
    # Steps 6 and 7 ran twice: the report has the re-run, after the crash.
    assert all(s.start_s > fixture.crash_s for s in report.steps if s.step in (6, 7, 8))
    assert report.run.restarts == 1 and report.run.steps == 20
    assert report.run.tokens == fixture.tokens
    # The window starts with the first attempt: its energy was spent too.
    assert report.window.start_s == pytest.approx(T0_WALL_S)
    assert report.window.end_s == pytest.approx(fixture.window_s[1])
    assert any("resumed" in note for note in report.notes)


def test_ranks_that_do_not_say_how_they_found_their_steps_are_counted(tmp_path: Path) -> None:
    _, report = built(
        tmp_path, NodeSpec("node1", gpus=2), NodeSpec("node2", gpus=1), steps_from_of={1: "rtk"}
    )
    found = report.timeline.steps_from
    assert found is not None and (found.ranks, found.unknown) == ({"rtk": 1}, 2)
    assert found.value is None  # the others said nothing: not one way for all
    run = summary_dict(report)["run"]
    assert run["steps_from"] == "mixed"
    assert run["steps_from_ranks"] == {"rtk": 1, "unknown": 2}
    assert "rtk's trainer on 1 rank; nothing said on 2 ranks" in format_summary(report)
