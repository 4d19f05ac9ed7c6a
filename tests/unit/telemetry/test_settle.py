"""Idle baselines and cooldowns: the settle rule, and both read from a real sampler."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

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


class Local:
    """This machine's sampler, seen as a one-node cluster."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def window(self, seconds: float) -> Mapping[str, PowerWindow]:
        return {"local": self.sampler.window(seconds)}


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Local]:
    sampler = Sampler(make_sensors("host"), tmp_path / "samples.arrows", rate_hz=20)
    sampler.start()
    yield Local(sampler)
    sampler.stop()


@pytest.mark.timing
def test_a_window_averages_the_samples_of_its_last_seconds(local: Local) -> None:
    time.sleep(1.2)
    window = local.window(1.0)["local"]
    rows = [r for r in local.sampler.recent if r[0] >= time.time() - 1.0]
    assert rows, "the sampler kept no recent readings"
    assert window.power_w == pytest.approx(
        sum(r[2] for r in rows if r[2] is not None) / len(rows), rel=0.2
    )


@pytest.mark.timing
def test_baseline_then_cooldown_on_a_real_sampler(local: Local) -> None:
    baseline = measure_baseline(local, 1.0)
    assert baseline.power_w is not None and baseline.power_w > 0
    assert set(baseline.per_node_power_w) == {"local"}
    began = time.monotonic()
    # A baseline far above anything seen settles at once; one far below never does
    # and the cooldown ends at its limit, saying so.
    done = cool_down(local, baseline.power_w + 1000, RULE)
    assert done.settled and done.duration_s is not None and done.duration_s < 5
    strict = CooldownRule(max_s=2, window_s=0.5, power_tolerance_w=0)
    never = cool_down(local, -1000.0, strict)
    assert not never.settled and never.duration_s is not None and 2 <= never.duration_s < 4
    assert time.monotonic() - began < 10
