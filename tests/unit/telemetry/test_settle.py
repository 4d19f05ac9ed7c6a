"""Idle baselines and cooldowns: the settle rule, and both read from a real sampler."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from toolkit import wallclock
from toolkit.telemetry.sampler import PowerWindow, Sampler
from toolkit.telemetry.sensors.factory import make_sensors
from toolkit.telemetry.settle import (
    CooldownRule,
    cool_down,
    hottest_c,
    is_settled,
    measure_baseline,
    total_power_w,
)

RULE = CooldownRule(max_s=30, window_s=1, power_tolerance_w=5, temperature_tolerance_c=2)


def test_power_must_come_back_near_the_baseline() -> None:
    assert is_settled(100.0, 104.9, None, None, RULE)
    assert not is_settled(100.0, 105.1, None, None, RULE)
    # 5% of a large baseline is more than the absolute tolerance.
    assert is_settled(1000.0, 1049.0, None, None, RULE)
    assert is_settled(None, 500.0, None, None, RULE)  # no baseline: power cannot hold it


def test_the_temperature_must_stop_moving_over_two_windows() -> None:
    assert not is_settled(100.0, 100.0, None, 60.0, RULE)  # a first reading is no trend
    assert not is_settled(100.0, 100.0, 63.0, 60.0, RULE)  # still cooling: 3 C in a window
    assert is_settled(100.0, 100.0, 61.0, 60.0, RULE)
    assert not is_settled(100.0, 200.0, 60.0, 60.0, RULE)  # cool but still drawing power


def test_cluster_totals_sum_nodes_and_take_the_hottest() -> None:
    window = {
        "a": PowerWindow(1.0, 100.0, 50.0),
        "b": PowerWindow(1.0, 50.0, 70.0),
        "c": PowerWindow(1.0, None, None),
    }
    assert total_power_w(window) == 150.0
    assert hottest_c(window) == 70.0
    assert total_power_w({"c": PowerWindow(1.0, None, None)}) is None


def wait_for(condition: Callable[[], bool], what: str, deadline_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail after ``deadline_s`` (a stuck sampler)."""
    give_up = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < give_up, f"no {what} after {deadline_s:g} s"
        time.sleep(0.01)


class Local:
    """This machine's sampler, seen as a one-node cluster."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def window(self, seconds: float) -> Mapping[str, PowerWindow]:
        return {"local": self.sampler.window(seconds)}

    def fresh_reading(self) -> None:
        """Wait until the sampler has a power reading taken after this call."""
        asked = wallclock.wall_s()

        def arrived() -> bool:
            recent = self.sampler.recent
            wall_s, _, power_w, _ = recent[-1] if recent else (0.0, "", None, None)
            return wall_s >= asked and power_w is not None

        wait_for(arrived, "fresh power reading")


class Moments:
    """The test's own seconds for the baseline and the cooldown: each sleep moves them
    on at once, then waits for the real sampler's next power reading, so the window
    read next (a second, in real time) holds one whatever the machine's load."""

    def __init__(self, local: Local) -> None:
        self.local = local
        self.now_s = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now_s += seconds
        self.local.fresh_reading()


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Local]:
    sampler = Sampler(make_sensors("host"), tmp_path / "samples.arrows", rate_hz=20)
    sampler.start()
    yield Local(sampler)
    sampler.stop()


def test_a_window_averages_the_samples_of_its_last_seconds(local: Local) -> None:
    """Per device the mean of the readings since ``seconds`` ago, summed; the hottest.

    On the real sampler's readings, stopped so that they no longer change, with a
    second device and an old reading added far from the window's edge.
    """
    sampler = local.sampler
    # A reading without power (the first may have none: utilisation needs two) is skipped.
    wait_for(lambda: sum(r[2] is not None for r in list(sampler.recent)) >= 5, "5 readings")
    sampler.stop()
    real = [w for _, _, w, _ in sampler.recent if w is not None]
    assert len(real) >= 5, real
    now_s = wallclock.wall_s()
    sampler.recent.extend(
        [
            (now_s - 1.0, "GPU-a", 100.0, 40.0),
            (now_s - 2.0, "GPU-a", 200.0, 50.0),
            (now_s - 1000.0, "host", 1e6, 90.0),  # outside the window, inside a longer one
        ]
    )
    host_w = sum(real) / len(real)
    recent = sampler.window(500.0)
    assert recent.seconds == 500.0
    assert recent.power_w == pytest.approx(host_w + 150.0, rel=1e-12)
    assert recent.temperature_c == 50.0
    longer = sampler.window(2000.0)
    with_old_w = (host_w * len(real) + 1e6) / (len(real) + 1)
    assert longer.power_w == pytest.approx(with_old_w + 150.0, rel=1e-12)
    assert longer.temperature_c == 90.0
    assert sampler.window(1e-9) == PowerWindow(1e-9, None, None)  # nothing that recent


def test_baseline_then_cooldown_on_a_real_sampler(local: Local) -> None:
    """The rules' outcomes on this machine's readings, in the test's own seconds.

    How long they take in real seconds is a benchmark
    (``benchmarks/timing_targets.py cooldown``).
    """
    moments = Moments(local)
    baseline = measure_baseline(local, 1.0, sleep=moments.sleep)
    assert moments.slept == [1.0] and baseline.duration_s == 1.0
    assert baseline.power_w is not None and baseline.power_w > 0
    assert set(baseline.per_node_power_w) == {"local"}
    # A baseline far above anything seen settles after its first window ...
    moments.slept.clear()
    done = cool_down(local, baseline.power_w + 1000, RULE, sleep=moments.sleep, clock=moments.clock)
    assert done.settled and moments.slept == [RULE.window_s]
    assert done.duration_s == RULE.window_s and done.max_s == RULE.max_s
    assert done.power_w is not None and done.baseline_power_w == baseline.power_w + 1000
    # ... one far below never does: the cooldown ends at its limit, saying so.
    moments.slept.clear()
    strict = CooldownRule(max_s=3, window_s=1, power_tolerance_w=0)
    never = cool_down(local, -1000.0, strict, sleep=moments.sleep, clock=moments.clock)
    assert not never.settled and moments.slept == [1.0] * 3
    assert never.duration_s == 3.0 and never.max_s == 3
    # Every window held a power reading: one without would have passed the rule.
    assert never.power_w is not None and never.power_w > 0
