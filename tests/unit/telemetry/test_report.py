"""rtk report on synthetic, format-exact run directories (tests/telemetry_fixtures.py).

Expected figures are computed from the samples the fixture wrote, never typed in.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from click.testing import CliRunner
from telemetry_fixtures import T0_WALL_S, BuiltRun, NodeSpec, RunSpec, build_run, gpu_uuid

from toolkit.cli.cmd_report import report_cmd
from toolkit.rundir.traces import read_table
from toolkit.telemetry.report import (
    Report,
    ReportError,
    build_report,
    format_summary,
    summary_dict,
    write_report,
)
from toolkit.telemetry.report.inputs.series import read_series

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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


def test_host_energy_is_integrated_power_and_says_when_it_is_modelled(tmp_path: Path) -> None:
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
    for node, device in (("node1", model), ("node2", ipmi)):
        expected = fixture.devices[(node, "host")].trapezoid_j(start, end)
        assert device.energy_j == pytest.approx(expected, rel=1e-9)
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


def test_clock_offsets_line_nodes_up(tmp_path: Path) -> None:
    fixture, report = built(
        tmp_path, NodeSpec("node1", gpus=1), NodeSpec("node2", gpus=1, offset_s=5.0)
    )
    # Every rank leaves a barrier at the same moment; corrected, their times agree.
    assert report.barriers and all(b.ranks == 2 for b in report.barriers)
    assert max(b.spread_s for b in report.barriers) < 1e-6
    assert report.window.start_s == pytest.approx(fixture.window_s[0])
    assert report.window.end_s == pytest.approx(fixture.window_s[1])
    # node2's power rises exactly when step 1 begins on the head's clock.
    step1_begin = fixture.steps[1][0]
    node2_manifest = report.data.manifest.nodes["node2"]
    series = read_series(
        "node2", report.data.traces["node2"], node2_manifest.offset_s, node2_manifest.devices, []
    )[gpu_uuid(1, 0)]
    t, power = series.values("power_w")
    first_busy = t[np.argmax(power >= fixture.spec.gpu_busy_w)]
    assert first_busy == pytest.approx(step1_begin, abs=1e-6)
    # And it lines up with the barriers: idle when the barrier lets go, busy after.
    for step, exit_s in fixture.barriers.items():
        at_exit = power[np.argmin(np.abs(t - exit_s))]
        assert at_exit == pytest.approx(fixture.spec.gpu_idle_w), step
    # Same hardware, same work: same energy, whichever clock the node keeps.
    node1, node2 = report.nodes["node1"], report.nodes["node2"]
    assert not node2.partial
    assert node2.devices[gpu_uuid(1, 0)].energy_j == pytest.approx(
        node1.devices[gpu_uuid(0, 0)].energy_j, rel=1e-9
    )
    assert node2.offset_s == 5.0


def test_markers_may_name_their_node_by_hostname(tmp_path: Path) -> None:
    fixture = build_run(
        tmp_path, RunSpec(nodes=[NodeSpec("node1"), NodeSpec("node2", offset_s=-3.0)])
    )
    for path in (fixture.run_dir / "markers").glob("rank-*.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({**r, "node": r["hostname"]}) + "\n" for r in lines))
    report = build_report(fixture.run_dir)
    assert max(b.spread_s for b in report.barriers) < 1e-6
    assert report.window.end_s == pytest.approx(fixture.window_s[1])


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
    fixture, report = built(
        tmp_path, NodeSpec("node1", gpus=1, gaps=[(gap_from_s, gap_to_s)], host_rapl=False)
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
    # Integrated power adds nothing over the gap ...
    truth = fixture.devices[("node1", "host")]
    expected = truth.trapezoid_j(start, start + gap_from_s) + truth.trapezoid_j(
        start + gap_to_s, end
    )
    assert host.energy_j == pytest.approx(expected, rel=1e-9)
    assert host.energy_covered_s == pytest.approx(end - start - 2.0)
    # ... a counter measured it: its delta over the gap is real.
    gpu_truth = fixture.devices[("node1", gpu_uuid(0, 0))]
    assert gpu.energy_j == pytest.approx(gpu_truth.counter_delta_j(start, end), rel=1e-9)
    # Steps inside the gap are not measured step by step.
    inside = [s for s in report.steps if s.end_s > start + gap_from_s and s.start_s < start + 5]
    assert inside and not any(s.complete for s in inside)


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


def test_per_step_energy_and_phases(tmp_path: Path) -> None:
    fixture, report = built(tmp_path, NodeSpec("node1", gpus=2), NodeSpec("node2", gpus=1))
    assert [s.step for s in report.steps] == list(range(1, fixture.spec.steps + 1))
    for step in report.steps:
        begin, end = fixture.steps[step.step]
        assert (step.start_s, step.end_s) == pytest.approx((begin, end))
        expected = 0.0
        for (_, device), truth in fixture.devices.items():
            if device == "host":  # modelled host power: the trapezoid of its samples
                expected += truth.trapezoid_j(begin, end)
            else:
                expected += truth.counter_delta_j(begin, end)
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


def test_throttle_time_and_reasons(tmp_path: Path) -> None:
    _, report = built(tmp_path, NodeSpec("node1", gpus=1, throttle=[(2.0, 4.0, 0x4 | 0x40)]))
    gpu = report.nodes["node1"].devices[gpu_uuid(0, 0)]
    # gpu_idle (set between steps) is not throttling.
    assert gpu.throttled_s == pytest.approx(2.0)
    assert gpu.throttle_reasons_s == pytest.approx({"sw_power_cap": 2.0, "hw_thermal": 2.0})


def test_faster_power_readings_are_used(tmp_path: Path) -> None:
    fixture, report = built(tmp_path, NodeSpec("node1", gpus=1), power_rate_hz=20.0)
    truth = fixture.devices[("node1", gpu_uuid(0, 0))]
    assert truth.power_t_s.size > 1.9 * truth.counter_t_s.size
    [check] = report.cross_checks
    start, end = check.windows[0].start_s, check.windows[0].end_s
    assert check.windows[0].power_j == pytest.approx(truth.trapezoid_j(start, end), rel=1e-9)


def test_files_plots_and_html(tmp_path: Path) -> None:
    fixture, report = built(
        tmp_path, NodeSpec("node1", gpus=2), NodeSpec("node2", gpus=1, lost_at_s=8.0)
    )
    files = write_report(report, csv=True)
    assert files.directory == fixture.run_dir / "report"
    summary = json.loads(files.summary_json.read_text())
    assert summary == json.loads(json.dumps(summary_dict(report)))
    assert summary["run"]["energy_j"] == pytest.approx(report.run.energy_j)
    assert summary["nodes"]["node2"]["partial"] is True
    assert summary["nodes"]["node2"]["devices"]["host"]["gaps"][0]["where"] == "trailing"
    assert summary["steps"]["stats"]["median_j"] == pytest.approx(report.step_stats.median_j)

    assert files.traces_csv is not None
    with files.traces_csv.open() as f:
        rows = list(csv.DictReader(f))
    written = read_table(
        sorted((fixture.run_dir / "telemetry" / "nodes").glob("*/trace-*.arrows"))
    ).num_rows
    assert len(rows) == written
    assert {"node", "device", "kind", "t_s", "wall_s", "mono_s", "power_w", "energy_j"} <= set(
        rows[0]
    )
    assert float(rows[0]["t_s"]) == pytest.approx(-fixture.spec.lead_s)
    assert max(float(r["t_s"]) for r in rows if r["node"] == "node2") < 8.0

    assert set(files.plots) == {"power", "heatmap", "distribution", "step_energy", "utilization"}
    for path in files.plots.values():
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100

    html = files.html.read_text()
    for table in ("run", "nodegroups", "nodes", "devices", "steps", "phases", "crosscheck"):
        assert f'<table id="{table}">' in html
    for name in files.plots:
        assert f'<img src="plots/{name}.png"' in html
    assert "node2" in html and "lost" in html


def test_no_markers_still_builds(tmp_path: Path) -> None:
    fixture, report = built(tmp_path, NodeSpec("node1", gpus=1), markers=False, metrics=False)
    assert report.window.basis == "samples"
    assert report.window.start_s == pytest.approx(fixture.window_s[0] - fixture.spec.lead_s)
    assert report.steps == [] and report.step_stats is None and report.phases == []
    assert report.run.steps is None and report.run.tokens_per_j is None
    assert report.run.energy_j > 0
    assert any("no markers" in note for note in report.notes)
    files = write_report(report)
    assert "No step markers" in files.html.read_text()


def test_cli_prints_the_summary(tmp_path: Path) -> None:
    fixture = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1", gpus=1)]))
    result = CliRunner().invoke(report_cmd, [str(fixture.run_dir)])
    assert result.exit_code == 0, result.output
    assert "node1" in result.output and "J/token" in result.output
    assert f"report: {fixture.run_dir / 'report' / 'report.html'}" in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 100

    result = CliRunner().invoke(report_cmd, [str(fixture.run_dir), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["run"]["steps"] == fixture.spec.steps


def test_run_without_telemetry_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "markers").mkdir()
    with pytest.raises(ReportError, match=r"no telemetry/manifest\.json.*--telemetry"):
        build_report(tmp_path)
    result = CliRunner().invoke(report_cmd, [str(tmp_path)])
    assert result.exit_code != 0 and isinstance(result.exception, ReportError)
    with pytest.raises(ReportError, match="no such run directory"):
        build_report(tmp_path / "nope")


def test_run_without_samples_is_a_clear_error(tmp_path: Path) -> None:
    fixture = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1", gpus=1)]))
    for path in (fixture.run_dir / "telemetry" / "nodes").glob("*/trace-*.arrows"):
        path.write_bytes(b"")
    with pytest.raises(ReportError, match="no telemetry samples"):
        build_report(fixture.run_dir)


def test_legacy_json_lines_runs_report_the_same_figures(tmp_path: Path) -> None:
    """A run recorded before traces were Arrow reads into exactly the same figures."""
    nodes = [NodeSpec("node1", gpus=2, throttle=[(2.0, 4.0, 0x4)]), NodeSpec("node2", offset_s=3)]
    reports = {}
    for trace_format in ("arrow", "jsonl"):
        fixture = build_run(
            tmp_path / trace_format, RunSpec(nodes=nodes, trace_format=trace_format)
        )
        reports[trace_format] = summary_dict(build_report(fixture.run_dir))
        reports[trace_format].pop("run_dir")
    assert reports["arrow"] == reports["jsonl"]


def test_a_straggler_is_named_with_the_energy_the_others_burn_waiting(tmp_path: Path) -> None:
    spec = RunSpec(
        nodes=[NodeSpec("node1", gpus=2), NodeSpec("node2", gpus=2, offset_s=-2.0)],
        straggler_rank=3,
    )
    fixture = build_run(tmp_path, spec)
    report = build_report(fixture.run_dir)
    found = report.stragglers
    assert found is not None
    barriers = spec.steps // spec.barrier_every
    assert found.barriers == barriers
    slowest = found.slowest
    assert slowest is not None and (slowest.rank, slowest.node) == (3, "node2")
    assert slowest.last == barriers and found.last_by_node == {"node2": barriers}
    by_rank = {r.rank: r for r in found.ranks}
    waited_s = spec.barrier_s * barriers
    # Each waiting GPU idles through the barrier: its idle power for every second waited.
    expected_j = {0: spec.gpu_idle_w, 1: spec.gpu_idle_w + 5, 2: spec.gpu_idle_w, 3: None}
    for rank, idle_w in expected_j.items():
        if idle_w is None:
            assert by_rank[rank].wait_s == 0.0
            assert by_rank[rank].wait_energy_j == pytest.approx(0.0, abs=1e-9)
            continue
        assert by_rank[rank].wait_s == pytest.approx(waited_s)
        assert by_rank[rank].wait_energy_j == pytest.approx(idle_w * waited_s, rel=1e-5)
        assert by_rank[rank].device == gpu_uuid(rank // 2, rank % 2)
    assert found.wait_energy_j == pytest.approx((3 * spec.gpu_idle_w + 5) * waited_s, rel=1e-5)
    assert found.share == pytest.approx(found.wait_energy_j / report.run.energy_j)
    text = format_summary(report)
    assert f"rank 3 on node2 ({barriers} of {barriers})" in text
    stragglers = summary_dict(report)["stragglers"]
    assert stragglers["slowest_rank"] == 3 and len(stragglers["ranks"]) == 4


def test_ranks_without_a_gpu_share_their_hosts_waiting_energy(tmp_path: Path) -> None:
    spec = RunSpec(
        nodes=[NodeSpec("cpu1", gpus=0, ranks=2), NodeSpec("cpu2", gpus=0, ranks=2)],
        straggler_rank=0,
    )
    report = build_report(build_run(tmp_path, spec).run_dir)
    found = report.stragglers
    assert found is not None and found.slowest is not None and found.slowest.rank == 0
    barriers = spec.steps // spec.barrier_every
    by_rank = {r.rank: r for r in found.ranks}
    for rank in (1, 2, 3):
        assert by_rank[rank].device == "host"
        # Two ranks per host: each counts half of the host's idle power while it waits.
        assert by_rank[rank].wait_energy_j == pytest.approx(
            spec.host_idle_w / 2 * spec.barrier_s * barriers, rel=1e-5
        )


def test_a_marker_file_with_text_that_is_no_utf8_is_read_line_by_line(tmp_path: Path) -> None:
    # Found by the property tests: Arrow's JSON reader kept the bad bytes and failed
    # with UnicodeDecodeError only when the GPU ids were read out.
    built = build_run(tmp_path, RunSpec(nodes=[NodeSpec("n1"), NodeSpec("n2")], steps=4))
    path = built.run_dir / "markers" / "rank-00000.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"gpu_uuid": "GPU-', b'"gpu_uuid": "\x80PU-', 1))
    report = build_report(built.run_dir)
    assert report.run.steps == 4
