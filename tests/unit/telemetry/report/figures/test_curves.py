"""figures/curves.py: GPU energy counters read at 1 Hz, below the 10 Hz full readings.

The sampler reads NVML's energy counter at its own rate (``energy_rate_hz``, 1 Hz by
default: 4 ms a call on an H200) and with its first and last readings. The report must
still get the run's energy exactly from the counter, a 0.5 s step's energy from the
counter spread over the 50 Hz power samples, steps measured completely, and the
cross-check right. The fixture's true energy (power per tick, counter exact at every
reading) is the reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from telemetry_fixtures import BuiltRun, NodeSpec, RunSpec, build_run, gpu_uuid

from toolkit.telemetry.report import Report, build_report
from toolkit.telemetry.report.figures.curves import EnergyCurve, counter_threshold_s

SPARSE = {"rate_hz": 10.0, "power_rate_hz": 50.0, "energy_rate_hz": 1.0}


def built(tmp_path: Path, *nodes: NodeSpec, **run: object) -> tuple[BuiltRun, Report]:
    spec = RunSpec(nodes=list(nodes), **{**SPARSE, **run})  # type: ignore[arg-type]
    fixture = build_run(tmp_path, spec)
    return fixture, build_report(fixture.run_dir)


def test_the_fixture_reads_the_counter_at_1_hz_and_at_both_ends(tmp_path: Path) -> None:
    fixture = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1")], **SPARSE))  # type: ignore[arg-type]
    truth = fixture.devices[("node1", gpu_uuid(0, 0))]
    steps = np.diff(truth.counter_t_s)
    assert steps[:-1] == pytest.approx(np.ones(steps.size - 1))  # 1 Hz ...
    assert 0 < steps[-1] <= 1.0  # ... and the last reading, wherever it falls
    assert truth.counter_t_s[-1] == truth.power_t_s[-1]
    assert truth.power_t_s.size > 40 * truth.counter_t_s.size


@pytest.mark.parametrize("energy_rate_hz", [1.0, 0.5])
def test_run_energy_is_the_counter_and_every_step_is_measured(
    tmp_path: Path, energy_rate_hz: float
) -> None:
    fixture, report = built(tmp_path, NodeSpec("node1", gpus=2), energy_rate_hz=energy_rate_hz)
    start, end = fixture.window_s
    for gpu in range(2):
        device = report.nodes["node1"].devices[gpu_uuid(0, gpu)]
        truth = fixture.devices[("node1", gpu_uuid(0, gpu))]
        assert device.energy_source == "counter"
        # Between two counter readings the curve is the counter's delta, exactly.
        power = EnergyCurve.from_power(truth.power_t_s, truth.power_w, 1.0)
        t = truth.counter_t_s
        curve, _ = EnergyCurve.from_counter(t, truth.counter_j, 3.0, shape=power)
        deltas = curve.energy_j(t[:-1], t[1:])
        assert deltas == pytest.approx(np.diff(truth.counter_j), rel=1e-9)
        assert curve.energy_j(t[0], t[-1])[0] == pytest.approx(truth.true_j(t[0], t[-1]))
        # The window's edges fall between readings: only their share is spread.
        assert device.energy_j == pytest.approx(truth.true_j(start, end), rel=1e-3)
        assert not device.partial and device.energy_covered_s == pytest.approx(end - start)
    # 1 s (or 2 s) between counter readings is no gap: every step is measured completely.
    assert report.steps and all(s.complete for s in report.steps)
    assert report.step_stats is not None and report.step_stats.incomplete == 0


def test_steps_shorter_than_the_counter_interval_get_their_own_energy(tmp_path: Path) -> None:
    fixture, report = built(tmp_path, NodeSpec("node1", gpus=1, host=False))
    uuid = gpu_uuid(0, 0)
    truth = fixture.devices[("node1", uuid)]
    errors = []
    for step in report.steps:
        begin, end = fixture.steps[step.step]
        errors.append(step.energy_j / truth.true_j(begin, end) - 1.0)
    # Spread over the power samples: about as close as their trapezoid, which misses
    # half a 20 ms tick of the busy-idle step at a step's end (1.5% of a step here,
    # where power jumps from tick to tick), plus what each second's scale carries.
    assert max(abs(e) for e in errors) < 0.03
    # The counter alone, linear over each second, is off by 7% to 37%: a second holds
    # parts of steps and of the idle time between them.
    linear, _ = EnergyCurve.from_counter(truth.counter_t_s, truth.counter_j, 3.0)
    linear_errors = [
        float(linear.energy_j(b, e)[0]) / truth.true_j(b, e) - 1.0
        for b, e in fixture.steps.values()
    ]
    assert max(abs(e) for e in linear_errors) > 0.2


def test_cross_check_with_a_1_hz_counter(tmp_path: Path) -> None:
    probe = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1")], **SPARSE), name="probe")  # type: ignore[arg-type]
    t10, t15 = (probe.barriers[s] - probe.window_s[0] for s in (10, 15))
    fixture, report = built(
        tmp_path,
        NodeSpec("node1", gpus=1),
        NodeSpec("node2", gpus=1, counter_scale=1.3, counter_scale_between=(t10, t15)),
    )
    clean, off = report.cross_checks
    # Every barrier window is compared: 1 s counter intervals are covered.
    assert len(clean.windows) == len(off.windows) == 3 and clean.skipped == 0
    assert not clean.flagged and clean.ratio == pytest.approx(1.0, abs=0.02)
    [flagged] = off.flagged
    assert (flagged.start_s, flagged.end_s) == pytest.approx(
        (fixture.barriers[10], fixture.barriers[15])
    )
    # The counter intervals that straddle a barrier blend the two scales a little.
    assert flagged.ratio == pytest.approx(1 / 1.3, rel=0.05)
    truth = fixture.devices[("node2", gpu_uuid(1, 0))]
    assert flagged.power_j == pytest.approx(
        truth.trapezoid_j(flagged.start_s, flagged.end_s), rel=1e-9
    )


def test_a_sample_gap_inside_a_counter_interval_is_not_covered(tmp_path: Path) -> None:
    gap_from_s, gap_to_s = 3.3, 5.3  # counter readings at 3 s and 6 s around it
    fixture, report = built(tmp_path, NodeSpec("node1", gpus=1, gaps=[(gap_from_s, gap_to_s)]))
    start, end = fixture.window_s
    gpu = report.nodes["node1"].devices[gpu_uuid(0, 0)]
    truth = fixture.devices[("node1", gpu_uuid(0, 0))]
    # The counter bridged the gap: the run's energy is still what it counted.
    assert gpu.energy_j == pytest.approx(truth.true_j(start, end), rel=1e-3)
    [gap] = gpu.gaps
    assert (gap.start_s, gap.end_s) == pytest.approx((start + gap_from_s, start + gap_to_s))
    # Steps that share a counter interval with the gap are not measured step by step;
    # the others are.
    bridged = (start + 3.0, start + 6.0)
    for step in report.steps:
        touches = step.end_s > bridged[0] and step.start_s < bridged[1]
        assert step.complete is not touches, step


def test_counter_threshold_follows_the_counter_rate() -> None:
    assert counter_threshold_s(np.arange(0.0, 10.0, 0.1), 1.0) == 1.0
    assert counter_threshold_s(np.arange(0.0, 10.0, 1.0), 1.0) == pytest.approx(3.0)
    assert counter_threshold_s(np.array([5.0]), 1.0) == 1.0


def test_a_counter_interval_the_power_does_not_cover_stays_linear() -> None:
    t_e = np.array([0.0, 1.0, 2.0])
    counter = np.array([0.0, 100.0, 300.0])
    # Power covers only the first second, 50 W then 150 W (a ramp: 100 J).
    t_p = np.array([0.0, 0.5, 1.0])
    power = EnergyCurve.from_power(t_p, np.array([50.0, 100.0, 150.0]), 1.0)
    shaped, _ = EnergyCurve.from_counter(t_e, counter, 3.0, shape=power)
    assert shaped.energy_j(0.0, 0.5)[0] == pytest.approx(100.0 * 37.5 / 100.0)
    assert shaped.energy_j(1.0, 1.5)[0] == pytest.approx(100.0)  # linear: 200 J over 1 s
    assert shaped.energy_j(0.0, 2.0)[0] == pytest.approx(300.0)
    assert shaped.covered_s(0.0, 2.0)[0] == pytest.approx(2.0)
