"""The stall detector: declared once, at the right time, never for a run's own rhythm."""

from __future__ import annotations

import pytest

from toolkit.stall.detector import (
    FLOOR_S,
    LONG_PHASE_MULTIPLE,
    LONGEST_WINDOW,
    MEDIAN_WINDOW,
    STARTUP_TIMEOUT_S,
    Stall,
    StallDetector,
    is_long_phase,
)


def _run(detector: StallDetector, steps: int, step_s: float, start_s: float = 0.0) -> float:
    """Feed ``steps`` steps of ``step_s`` each from ``start_s`` (checked every step); the end time."""
    now = start_s
    first = (detector.step or 0) + 1
    for step in range(first, first + steps):
        now += step_s
        assert detector.check(now) is None
        assert detector.step_done(step, now) is None
    return now


def _first_stall(detector: StallDetector, start_s: float, until_s: float) -> tuple[float, Stall]:
    """Check once a second from ``start_s``: the first time a stall is declared, and it."""
    now = start_s
    while now < until_s:
        now += 1.0
        stall = detector.check(now)
        if stall is not None:
            return now, stall
    raise AssertionError(f"no stall declared by {until_s}")


def test_a_steady_run_then_silence_is_declared_once_after_the_floor_and_not_before() -> None:
    detector = StallDetector(started_s=0.0)
    end = _run(detector, 200, 0.5, start_s=5.0)  # 1 s steps would do as well: the floor rules
    assert detector.expected_step_s == pytest.approx(0.5)
    assert detector.timeout_s == FLOOR_S  # 10 x 0.5 s is below the floor
    assert detector.check(end + FLOOR_S) is None  # not longer than the timeout yet
    at, stall = _first_stall(detector, end + FLOOR_S - 1, end + 3600)
    assert at == end + FLOOR_S + 1
    assert stall == Stall(step=200, stalled_s=pytest.approx(FLOOR_S + 1), timeout_s=FLOOR_S)
    # Once: silence goes on, nothing more is declared.
    assert all(detector.check(at + k) is None for k in range(1, 3600, 60))


def test_the_learned_timeout_follows_slow_steps() -> None:
    detector = StallDetector(started_s=0.0, floor_s=1.0)
    end = _run(detector, 50, 20.0)  # 20 s steps: 10 x the median is 200 s
    assert detector.timeout_s == pytest.approx(200.0)
    assert detector.check(end + 199.0) is None
    stall = detector.check(end + 201.0)
    assert stall is not None and stall.timeout_s == pytest.approx(200.0)


def test_a_checkpoint_step_10x_every_5_steps_over_500_steps_is_never_declared() -> None:
    # The floor out of the way, so the learned part alone must carry it.
    detector = StallDetector(started_s=0.0, floor_s=1.0)
    now = 0.0
    for step in range(1, 501):
        step_s = 10.0 if step % 5 == 0 else 1.0
        for _ in range(int(step_s)):  # a check every second of the step
            now += 1.0
            assert detector.check(now) is None, f"declared at step {step}"
        detector.step_done(step, now)
    assert detector.expected_step_s == 1.0
    assert detector.timeout_s == pytest.approx(20.0)  # 2 x the longest recent step


def test_a_checkpoint_phase_extends_the_wait_until_progress() -> None:
    detector = StallDetector(started_s=0.0, floor_s=1.0)
    end = _run(detector, 20, 1.0)  # learned: 10 s
    assert detector.timeout_s == pytest.approx(10.0)
    detector.phase("forward", end)
    assert detector.timeout_s == pytest.approx(10.0)
    detector.phase("save_checkpoint", end)
    assert detector.timeout_s == pytest.approx(10.0 * LONG_PHASE_MULTIPLE)
    assert detector.check(end + 90.0) is None  # a 90 s checkpoint is no stall
    assert detector.step_done(21, end + 90.0) is None
    # The next step is an ordinary one again (the checkpoint's 90 s is learned as one).
    assert detector.timeout_s == pytest.approx(180.0)


@pytest.mark.parametrize(
    ("name", "long"),
    [
        ("checkpoint", True),
        ("save_model", True),
        ("eval", True),
        ("Validation", True),
        ("ckpt", True),
        ("forward", False),
        ("backward", False),
        ("report", False),
    ],
)
def test_long_phases_are_named_by_a_part_of_their_name(name: str, long: bool) -> None:
    assert is_long_phase(name) is long


@pytest.mark.parametrize("fixed_s", [5.0, 100.0])  # below and above the learned 60 s
def test_a_fixed_timeout_is_honoured_whatever_the_steps(fixed_s: float) -> None:
    detector = StallDetector(started_s=0.0, timeout_s=fixed_s)
    end = _run(detector, 30, 1.0)
    assert detector.timeout_s == fixed_s
    assert detector.check(end + fixed_s) is None
    assert detector.check(end + fixed_s + 0.5) == Stall(30, fixed_s + 0.5, fixed_s)


def test_a_stall_is_neared_past_half_its_timeout_until_declared_or_a_step_comes() -> None:
    detector = StallDetector(started_s=0.0, timeout_s=20.0)
    end = _run(detector, 5, 1.0)
    assert not detector.nearing(end + 10.0)  # half the timeout, not past it
    assert detector.nearing(end + 10.5)
    assert detector.nearing(end + 5.5, fraction=0.25)
    detector.step_done(6, end + 11.0)
    assert not detector.nearing(end + 11.0 + 10.0)  # the wait starts again
    assert detector.nearing(end + 11.0 + 10.5)
    assert detector.check(end + 11.0 + 20.5) is not None
    assert not detector.nearing(end + 11.0 + 30.0)  # declared: nothing left to near


def test_progress_resumes_then_a_second_stall_is_declared() -> None:
    detector = StallDetector(started_s=0.0)
    end = _run(detector, 10, 1.0)
    first = detector.check(end + 95.0)
    assert first is not None and first.step == 10
    assert detector.check(end + 96.0) is None
    # Another rank finishing the same step is no progress, and ends nothing.
    assert detector.step_done(10, end + 97.0) is None
    assert detector.check(end + 98.0) is None
    resumed = detector.step_done(11, end + 100.0)
    assert resumed == pytest.approx(100.0)  # "resumed after 100 s"
    assert detector.timeout_s == FLOOR_S  # the stall is not learned as a step
    end = _run(detector, 20, 1.0, start_s=end + 100.0)
    second = detector.check(end + 120.0)
    assert second is not None and second.step == 31
    assert second.stalled_s == pytest.approx(120.0)


def test_the_start_up_timeout_holds_until_a_step_is_timed() -> None:
    detector = StallDetector(started_s=100.0)
    assert detector.step is None and detector.expected_step_s is None
    assert detector.timeout_s == STARTUP_TIMEOUT_S
    assert detector.check(100.0 + STARTUP_TIMEOUT_S - 1) is None
    stall = detector.check(100.0 + STARTUP_TIMEOUT_S + 1)
    assert stall == Stall(None, STARTUP_TIMEOUT_S + 1, STARTUP_TIMEOUT_S)
    # The first step (start-up, 700 s) is not learned; the second is the first timed.
    assert detector.step_done(1, 800.0) == pytest.approx(700.0)
    assert detector.timeout_s == STARTUP_TIMEOUT_S and detector.expected_step_s is None
    detector.step_done(2, 801.0)
    assert detector.timeout_s == FLOOR_S and detector.expected_step_s == 1.0


def test_a_settable_start_up_timeout() -> None:
    detector = StallDetector(started_s=0.0, startup_timeout_s=30.0)
    assert detector.check(30.0) is None
    assert detector.check(31.0) == Stall(None, 31.0, 30.0)


def test_steps_read_in_a_batch_split_the_batch_interval() -> None:
    detector = StallDetector(started_s=0.0)
    detector.step_done(1, 10.0)
    for step in range(2, 102):  # 100 steps read at once, a second later
        detector.step_done(step, 11.0)
    assert detector.step == 101
    assert detector.expected_step_s == 0.0  # 1 s over step 2, then nothing per step
    assert detector.timeout_s == FLOOR_S


def test_a_step_whose_time_is_behind_the_last_progress_counts_as_now() -> None:
    detector = StallDetector(started_s=0.0)
    detector.step_done(1, 10.0)
    detector.step_done(2, 9.0)  # another node's clock is behind
    assert detector.expected_step_s == 0.0 and detector.timeout_s == FLOOR_S
    assert detector.check(9.0 + FLOOR_S + 0.5) is None  # the wait runs from 10 s, not 9
    assert detector.check(10.0 + FLOOR_S + 0.5) is not None


def test_memory_stays_bounded_over_a_long_run() -> None:
    detector = StallDetector(started_s=0.0)
    now = 0.0
    for step in range(1, 5 * LONGEST_WINDOW):
        now += 1.0 + (step % 7) * 0.1
        detector.step_done(step, now)
    assert len(detector._recent) == len(detector._sorted) == MEDIAN_WINDOW
    assert len(detector._longest) <= LONGEST_WINDOW
    assert detector._longest[0][1] == pytest.approx(1.6)


def test_the_longest_step_is_forgotten_after_its_window() -> None:
    detector = StallDetector(started_s=0.0, floor_s=1.0)
    detector.step_done(1, 0.0)
    detector.step_done(2, 50.0)  # one 50 s step
    assert detector.timeout_s == pytest.approx(500.0)  # median of one: 10 x 50
    _run(detector, LONGEST_WINDOW, 1.0, start_s=50.0)
    assert detector.timeout_s == pytest.approx(10.0)


@pytest.mark.parametrize("field", ["timeout_s", "startup_timeout_s", "floor_s"])
def test_a_timeout_that_is_not_positive_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        StallDetector(started_s=0.0, **{field: 0.0})
