"""outliers.py: devices and nodes against the cluster's median device."""

from __future__ import annotations

import statistics
from dataclasses import replace

import numpy as np
import pytest

from toolkit.telemetry.report.figures.energy import DeviceReport
from toolkit.telemetry.report.figures.outliers import (
    HOTTER_C,
    MIN_THROTTLED_S,
    POWER_EXCESS,
    THROTTLED_SHARE,
    DeviceFigures,
    find_outliers,
)
from toolkit.telemetry.report.figures.views import Buckets, DeviceView

WINDOW_S = 3600.0


def gpu(
    node: str,
    index: int,
    power_w: float = 500.0,
    throttled_s: float = 0.0,
    hottest_c: float | None = 70.0,
) -> DeviceFigures:
    return DeviceFigures(
        node=node,
        device=f"GPU-{node}-{index}",
        kind="gpu",
        energy_j=power_w * WINDOW_S,
        avg_power_w=power_w,
        throttled_s=throttled_s,
        max_temperature_c=hottest_c,
        power_source="nvml_instant",
    )


def cluster(nodes: int = 4, gpus: int = 8) -> list[DeviceFigures]:
    """Alike GPUs, slightly spread (499 to 501 W)."""
    return [gpu(f"n{n}", g, power_w=500.0 + (g % 3) - 1) for n in range(nodes) for g in range(gpus)]


def test_alike_gpus_have_no_outliers() -> None:
    devices = cluster()
    found = find_outliers(devices, WINDOW_S)
    assert found.found == []
    assert found.compared == {"gpu": 32, "host": 0}
    assert found.medians["gpu"]["avg_power_w"] == pytest.approx(
        statistics.median(d.avg_power_w for d in devices if d.avg_power_w is not None)
    )


def test_a_gpu_drawing_more_than_the_threshold_is_named_and_one_just_below_is_not() -> None:
    devices = cluster()
    median_w = statistics.median(d.avg_power_w for d in devices if d.avg_power_w is not None)
    above_w = median_w * (1 + POWER_EXCESS) * 1.01
    below_w = median_w * (1 + POWER_EXCESS) * 0.99
    devices[5] = gpu("n0", 5, power_w=above_w)
    devices[12] = gpu("n1", 4, power_w=below_w)
    found = find_outliers(devices, WINDOW_S)
    named = {(o.node, o.device, o.metric) for o in found.found}
    # Energy follows power here (same window): both figures name the same GPU.
    assert named == {("n0", "GPU-n0-5", "avg_power_w"), ("n0", "GPU-n0-5", "energy_j")}
    power = next(o for o in found.found if o.metric == "avg_power_w")
    new_median = statistics.median(d.avg_power_w for d in devices if d.avg_power_w is not None)
    assert power.value == pytest.approx(above_w)
    assert power.median == pytest.approx(new_median)
    assert power.excess == pytest.approx(above_w / new_median - 1)
    assert power.score == pytest.approx(power.excess / POWER_EXCESS)
    assert power.devices == 1


def test_a_gpu_drawing_much_less_is_named_for_power_not_for_energy() -> None:
    devices = cluster()
    devices[3] = gpu("n0", 3, power_w=200.0)
    found = find_outliers(devices, WINDOW_S)
    [low] = found.found
    assert (low.device, low.metric) == ("GPU-n0-3", "avg_power_w")
    assert low.excess < -POWER_EXCESS


def test_hotter_and_throttled_gpus_use_absolute_thresholds() -> None:
    devices = cluster()
    devices[1] = gpu("n0", 1, hottest_c=70.0 + HOTTER_C + 0.5)
    devices[2] = gpu("n0", 2, hottest_c=70.0 + HOTTER_C - 0.5)
    threshold_s = max(THROTTLED_SHARE * WINDOW_S, MIN_THROTTLED_S)
    devices[9] = gpu("n1", 1, throttled_s=threshold_s + 1)
    devices[10] = gpu("n1", 2, throttled_s=threshold_s - 1)
    found = find_outliers(devices, WINDOW_S)
    named = {(o.device, o.metric): o for o in found.found}
    assert set(named) == {("GPU-n0-1", "max_temperature_c"), ("GPU-n1-1", "throttled_s")}
    assert named[("GPU-n0-1", "max_temperature_c")].excess == pytest.approx(HOTTER_C + 0.5)
    assert named[("GPU-n1-1", "throttled_s")].excess == pytest.approx(threshold_s + 1)
    # A short window still needs a second of throttling beyond the median.
    short = find_outliers([*cluster(), gpu("n9", 0, throttled_s=0.9)], 10.0)
    assert short.found == []


def test_a_node_whose_gpus_are_all_out_is_named_once() -> None:
    devices = [
        gpu(f"n{n}", g, power_w=650.0 if n == 2 else 500.0) for n in range(5) for g in range(4)
    ]
    devices[0] = gpu("n0", 0, power_w=650.0)  # one GPU of n0 only: named on its own
    found = find_outliers(devices, WINDOW_S)
    power = [o for o in found.found if o.metric == "avg_power_w"]
    assert [(o.node, o.device, o.devices) for o in power] == [
        ("n2", None, 4),
        ("n0", "GPU-n0-0", 1),
    ]
    node = power[0]
    assert node.value == pytest.approx(650.0) and node.median == pytest.approx(500.0)
    assert node.excess == pytest.approx(0.3)


def test_outliers_take_turns_between_figures() -> None:
    """A GPU throttled all run must not push a GPU drawing 25% more out of the top lines."""
    devices = cluster()
    for g in range(4):
        devices[g] = gpu("n0", g, throttled_s=3000.0 - g)
    devices[20] = gpu("n2", 4, power_w=625.0)
    found = find_outliers(devices, WINDOW_S)
    firsts = [o.metric for o in found.found[:3]]
    assert firsts[0] == "throttled_s"
    assert set(firsts) == {"throttled_s", "avg_power_w", "energy_j"}
    throttled = [o.score for o in found.found if o.metric == "throttled_s"]
    assert throttled == sorted(throttled, reverse=True)
    subjects = found.subjects()
    assert subjects[0][0:2] == ("n0", "GPU-n0-0")
    assert ("n2", "GPU-n2-4") in [s[:2] for s in subjects[:2]]


def test_too_few_gpus_are_not_compared() -> None:
    found = find_outliers([gpu("n0", 0), gpu("n1", 0, power_w=900.0)], WINDOW_S)
    assert found.found == []
    assert found.medians["gpu"]["avg_power_w"] is None


def test_hosts_are_compared_only_when_they_measure_alike() -> None:
    hosts = [
        DeviceFigures(f"n{i}", "host", "host", 100.0 * WINDOW_S, 100.0, 0.0, None, "model")
        for i in range(4)
    ]
    hosts[3] = DeviceFigures("n3", "host", "host", 200.0 * WINDOW_S, 200.0, 0.0, None, "model")
    found = find_outliers(hosts, WINDOW_S)
    assert {(o.node, o.metric) for o in found.found} == {("n3", "avg_power_w"), ("n3", "energy_j")}
    hosts[0] = DeviceFigures("n0", "host", "host", 100.0 * WINDOW_S, 100.0, 0.0, None, "ipmi")
    mixed = find_outliers(hosts, WINDOW_S)
    assert mixed.found == [] and "host" not in mixed.medians


def test_figures_of_a_device_report_take_the_hottest_bucket_of_its_view() -> None:
    buckets = Buckets(0.0, 1.0, 4)
    view = DeviceView(
        buckets, np.array([1.0, 2.0, 3.0, 4.0]), {"temperature_c": np.array([50, np.nan, 71.5, 60])}
    )
    device = DeviceReport(
        node="n0",
        device="GPU-x",
        kind="gpu",
        samples=40,
        energy_j=1000.0,
        energy_source="counter",
        energy_covered_s=4.0,
        avg_power_w=250.0,
        peak_power_w=300.0,
        power_source="nvml_instant",
        covered_fraction=1.0,
        gaps=[],
        throttled_s=1.5,
        throttle_reasons_s={"hw_thermal": 1.5},
        counter_resets=0,
        view=view,
    )
    figures = DeviceFigures.of(device)
    assert figures.max_temperature_c == pytest.approx(71.5)
    assert (figures.energy_j, figures.avg_power_w, figures.throttled_s) == (1000.0, 250.0, 1.5)
    without = DeviceFigures.of(replace(device, view=None))
    assert without.max_temperature_c is None
