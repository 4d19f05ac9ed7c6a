"""figures/energy.py (and curves.py): each device's energy, power, gaps and throttling.

Synthetic, format-exact run directories (tests/telemetry_fixtures.py); expected figures
are computed from the samples the fixture wrote, never typed in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from telemetry_fixtures import BuiltRun, NodeSpec, RunSpec, build_run, gpu_uuid

from toolkit.telemetry.report import Report, build_report, format_summary


def built(tmp_path: Path, *nodes: NodeSpec, **run: object) -> tuple[BuiltRun, Report]:
    fixture = build_run(tmp_path, RunSpec(nodes=list(nodes), **run))  # type: ignore[arg-type]
    return fixture, build_report(fixture.run_dir)


def test_gpu_energy_comes_from_the_counter(tmp_path: Path) -> None:
    fixture, report = built(tmp_path, NodeSpec("node1", gpus=2))
    start, end = fixture.window_s
    assert (report.window.start_s, report.window.end_s) == pytest.approx((start, end))
    for gpu in range(2):
        device = report.nodes["node1"].devices[gpu_uuid(0, gpu)]
        truth = fixture.devices[("node1", gpu_uuid(0, gpu))]
        assert device.energy_source == "counter"
        assert device.energy_j == pytest.approx(truth.counter_delta_j(start, end), rel=1e-9)
        # The counter is exact here: it equals the true integral of the power.
        assert device.energy_j == pytest.approx(truth.true_j(start, end), rel=1e-9)
        assert device.energy_wh == pytest.approx(device.energy_j / 3600)
        assert device.avg_power_w == pytest.approx(device.energy_j / (end - start))
        assert device.peak_power_w == pytest.approx(truth.power_w.max())
        assert not device.partial and device.covered_fraction == pytest.approx(1.0)


def test_host_energy_is_the_model_s_integral_and_says_when_it_is_modelled(
    tmp_path: Path,
) -> None:
    fixture, report = built(
        tmp_path,
        NodeSpec("node1", gpus=1),
        NodeSpec("node2", gpus=0, host_power_source="ipmi"),
        NodeSpec("node3", gpus=0, host_rapl=True),
    )
    start, end = fixture.window_s
    model = report.nodes["node1"].devices["host"]
    ipmi = report.nodes["node2"].devices["host"]
    rapl = report.nodes["node3"].devices["host"]
    assert model.energy_source == "modelled"
    assert ipmi.energy_source == "integrated power"
    assert rapl.energy_source == "counter"
    assert model.energy_j == pytest.approx(
        fixture.devices[("node1", "host")].counter_delta_j(start, end), rel=1e-9
    )
    expected = fixture.devices[("node2", "host")].trapezoid_j(start, end)
    assert ipmi.energy_j == pytest.approx(expected, rel=1e-9)
    assert rapl.energy_j == pytest.approx(
        fixture.devices[("node3", "host")].counter_delta_j(start, end), rel=1e-9
    )
    # Node totals: devices summed; an IPMI wall reading alone (the GPUs are in it).
    node1 = report.nodes["node1"]
    assert node1.energy_j == pytest.approx(sum(d.energy_j for d in node1.devices.values()))
    assert report.run.energy_j == pytest.approx(sum(n.energy_j for n in report.nodes.values()))


def test_ipmi_host_reading_is_the_whole_node(tmp_path: Path) -> None:
    _, report = built(tmp_path, NodeSpec("node1", gpus=2, host_power_source="ipmi"))
    node = report.nodes["node1"]
    assert node.energy_j == pytest.approx(node.devices["host"].energy_j)
    assert "IPMI" in node.scope
    assert [d.counted for d in node.devices.values()] == [True, False, False]


def test_lost_node_keeps_its_data_and_marks_the_trailing_gap(tmp_path: Path) -> None:
    lost_at_s = 6.0
    fixture, report = built(
        tmp_path, NodeSpec("node1", gpus=1), NodeSpec("node2", gpus=1, lost_at_s=lost_at_s)
    )
    start, end = fixture.window_s
    node = report.nodes["node2"]
    assert node.status == "lost" and node.partial and report.run.partial
    gpu = node.devices[gpu_uuid(1, 0)]
    truth = fixture.devices[("node2", gpu_uuid(1, 0))]
    last_s = truth.counter_t_s[-1]
    assert last_s < start + lost_at_s <= last_s + 0.1 + 1e-6
    [gap] = gpu.gaps
    assert gap.where == "trailing"
    assert (gap.start_s, gap.end_s) == pytest.approx((last_s, end))
    assert gpu.covered_fraction == pytest.approx((last_s - start) / (end - start))
    assert node.covered_fraction == pytest.approx((last_s - start) / (end - start))
    # Its energy is what it measured, up to the loss, and nothing invented after.
    assert gpu.energy_j == pytest.approx(truth.counter_delta_j(start, last_s), rel=1e-9)
    assert gpu.energy_covered_s == pytest.approx(last_s - start)
    # Steps after the loss are left out of the per-step distribution.
    late = [s for s in report.steps if s.end_s > last_s]
    assert late and not any(s.complete for s in late)
    assert report.step_stats is not None and report.step_stats.incomplete == len(late)
    text = format_summary(report)
    assert "lost" in text and "trailing" in text and "partial" in text
    assert any("node2" in note and "stop" in note for note in report.notes)


def test_inner_gap(tmp_path: Path) -> None:
    gap_from_s, gap_to_s = 3.0, 5.0
    gaps = [(gap_from_s, gap_to_s)]
    fixture, report = built(
        tmp_path,
        NodeSpec("node1", gpus=1, gaps=gaps, host_power_source="ipmi"),
        NodeSpec("node2", gpus=0, gaps=gaps),
    )
    start, end = fixture.window_s
    node = report.nodes["node1"]
    host, gpu = node.devices["host"], node.devices[gpu_uuid(0, 0)]
    for device in (host, gpu):
        [gap] = device.gaps
        assert gap.where == "inner"
        assert (gap.start_s, gap.end_s) == pytest.approx((start + gap_from_s, start + gap_to_s))
        assert device.covered_fraction == pytest.approx(1 - 2.0 / (end - start))
        assert device.partial
    [node_gap] = node.gaps
    assert node_gap.duration_s == pytest.approx(2.0)
    # Integrated power (IPMI's) adds nothing over the gap ...
    truth = fixture.devices[("node1", "host")]
    expected = truth.trapezoid_j(start, start + gap_from_s) + truth.trapezoid_j(
        start + gap_to_s, end
    )
    assert host.energy_j == pytest.approx(expected, rel=1e-9)
    assert host.energy_covered_s == pytest.approx(end - start - 2.0)
    # ... a counter measured it: its delta over the gap is real.
    gpu_truth = fixture.devices[("node1", gpu_uuid(0, 0))]
    assert gpu.energy_j == pytest.approx(gpu_truth.counter_delta_j(start, end), rel=1e-9)
    # So did the CPU model: each reading models the CPU time since the last one, so a
    # sampler that stalled on a loaded node still accounts for the time it stalled.
    modelled = report.nodes["node2"].devices["host"]
    assert modelled.energy_source == "modelled" and modelled.gaps
    model_truth = fixture.devices[("node2", "host")]
    assert modelled.energy_j == pytest.approx(model_truth.counter_delta_j(start, end), rel=1e-9)
    assert modelled.energy_j > model_truth.trapezoid_j(start, start + gap_from_s)
    # Steps inside the gap are not measured step by step.
    inside = [s for s in report.steps if s.end_s > start + gap_from_s and s.start_s < start + 5]
    assert inside and not any(s.complete for s in inside)


def test_throttle_time_and_reasons(tmp_path: Path) -> None:
    _, report = built(tmp_path, NodeSpec("node1", gpus=1, throttle=[(2.0, 4.0, 0x4 | 0x40)]))
    gpu = report.nodes["node1"].devices[gpu_uuid(0, 0)]
    # gpu_idle (set between steps) is not throttling.
    assert gpu.throttled_s == pytest.approx(2.0)
    assert gpu.throttle_reasons_s == pytest.approx({"sw_power_cap": 2.0, "hw_thermal": 2.0})
