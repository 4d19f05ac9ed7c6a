"""The report's view of a power policy: the baseline, the kept limits, what they saved."""

from __future__ import annotations

import pytest

from toolkit.power.policy_summary import summarize
from toolkit.power.records import PowerLog, WindowRecord
from toolkit.power.windows import Decision, GpuKey, GpuRange, Window

A = GpuKey("n", 0)


def _record(first: int, steps: int, limit_w: float, step_s: float, joules: float) -> WindowRecord:
    window = Window({A: limit_w}, steps, step_s, {A: joules * steps})
    return WindowRecord(float(first), first, window, joules, limit_w)


def _log(policy: str, windows: list[WindowRecord], settled_from: int | None) -> PowerLog:
    decisions = [
        Decision({A: 700.0}, f"decision {i}", 5, settled_from is not None and i >= settled_from)
        for i in range(len(windows) + 1)
    ]
    return PowerLog(policy, {}, {A: GpuRange(200.0, 700.0, 700.0)}, tuple(windows),
                    tuple(decisions))  # fmt: skip


def test_optimize_compares_the_kept_limit_with_the_warm_up() -> None:
    windows = [
        _record(1, 10, 700.0, 1.00, 500.0),  # the warm-up
        _record(11, 5, 600.0, 1.00, 450.0),
        _record(16, 5, 500.0, 1.02, 400.0),
        _record(21, 100, 500.0, 1.03, 390.0),  # kept
        _record(121, 100, 500.0, 1.01, 410.0),  # kept
    ]
    summary = summarize(_log("optimize", windows, settled_from=3))
    assert summary.baseline is not None and summary.baseline.steps == 10
    assert summary.kept is not None and summary.kept.steps == 200
    assert summary.kept.energy_per_step_j == pytest.approx(400.0)
    assert summary.energy_saved == pytest.approx(0.2)
    assert summary.slowdown == pytest.approx(0.02)
    first, second = summary.lines()
    assert first.startswith("power policy optimize on 1 GPU(s): kept 500 W (mean) after 5")
    assert "20.0% less energy per step, +2.0% time per step" in first
    assert "against the first 10 steps at 700 W" in first
    assert second == "  500.0 -> 400.0 J/step, 1.000 -> 1.020 s/step"


def test_an_unsettled_optimize_says_so_and_stragglers_count_their_last_window() -> None:
    windows = [_record(1, 10, 700.0, 1.0, 500.0), _record(11, 5, 650.0, 1.0, 480.0)]
    unsettled = summarize(_log("optimize", windows, settled_from=None))
    assert unsettled.kept is None and unsettled.energy_saved is None
    assert unsettled.lines() == [
        "power policy optimize on 1 GPU(s): not settled (2 window(s)): decision 2"
    ]
    stragglers = summarize(_log("stragglers", windows, settled_from=None))
    assert stragglers.kept is not None and stragglers.energy_saved == pytest.approx(0.04)
    assert summarize(_log("optimize", [], None)).lines()[0].endswith("no window measured")


def test_a_choice_made_as_the_run_ended_is_reported_as_kept_without_figures() -> None:
    windows = [_record(1, 10, 700.0, 1.0, 500.0), _record(11, 5, 600.0, 1.0, 450.0)]
    summary = summarize(_log("optimize", windows, settled_from=2))  # after the last window
    assert summary.kept is None and summary.energy_saved is None
    assert summary.chosen_w == pytest.approx(700.0)
    assert summary.lines() == [
        "power policy optimize on 1 GPU(s): kept 700 W (mean) after 2 window(s); "
        "the run ended before a window at it was measured"
    ]
