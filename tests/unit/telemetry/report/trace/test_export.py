"""The Perfetto / Chrome trace-event export (report/trace.json.gz) of synthetic runs.

Expected times come from the fixture's truth (head-timeline seconds), never typed in;
every written file is also checked against what Perfetto's JSON importer accepts.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from telemetry_fixtures import BuiltRun, NodeSpec, RunSpec, build_run, gpu_uuid

from toolkit.cli.cmd_report import report_cmd
from toolkit.telemetry.report import Report, ReportError, build_report, write_report
from toolkit.telemetry.report.terminal import short_device
from toolkit.telemetry.report.trace.events import PID_BASE, TID_BASE
from toolkit.telemetry.report.trace.export import TraceWindow, write_trace

Event = dict[str, Any]
METADATA = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


def built(tmp_path: Path, *nodes: NodeSpec, **run: object) -> tuple[BuiltRun, Report]:
    fixture = build_run(tmp_path, RunSpec(nodes=list(nodes), **run))  # type: ignore[arg-type]
    return fixture, build_report(fixture.run_dir)


def read_trace(path: Path) -> dict[str, Any]:
    """The trace, after checking it against the rules of Perfetto's JSON importer."""
    text = gzip.decompress(path.read_bytes()).decode("utf-8")
    trace = json.loads(text)
    check_importable(trace, text)
    return trace  # type: ignore[no-any-return]


def check_importable(trace: Any, text: str) -> None:
    # Perfetto stops at top-level keys it does not know in some versions and reads
    # displayTimeUnit as the unit of ts: only these two keys.
    assert isinstance(trace, dict) and set(trace) == {"otherData", "traceEvents"}
    assert text.lstrip().startswith('{"otherData"')
    assert all(isinstance(v, str) for v in trace["otherData"].values())
    assert "\\u" not in text  # older tokenizers reject unicode escapes
    for event in trace["traceEvents"]:
        assert not _has_array(event), event  # the tokenizer rejects arrays in events
        assert event["ph"] in ("M", "X", "C", "i"), event
        for key in ("pid", "tid"):
            assert isinstance(event[key], int) and 0 <= event[key] < 2**32, event
        if event["ph"] == "M":
            assert event["name"] in METADATA and "ts" not in event, event
            continue
        assert _number(event["ts"]) and isinstance(event["ts"], int), event
        assert isinstance(event["name"], str) and event["name"], event
        args = event["args"]
        assert isinstance(args, dict), event
        if event["ph"] == "X":
            assert isinstance(event["dur"], int) and event["dur"] >= 0, event
        elif event["ph"] == "i":
            assert event["s"] == "t" and "dur" not in event, event  # on its thread's track
        else:
            assert args and all(_number(v) for v in args.values()), event


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _has_array(value: Any) -> bool:
    if isinstance(value, list):
        return True
    return isinstance(value, dict) and any(_has_array(v) for v in value.values())


def slices(trace: dict[str, Any]) -> list[Event]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def counters(trace: dict[str, Any], pid: int, name: str) -> list[Event]:
    points = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["pid"] == pid]
    return [e for e in points if e["name"] == name]


def names(trace: dict[str, Any], kind: str) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == kind
    }


def value_at(points: list[Event], ts_us: float, key: str = "power_w") -> float:
    """The counter's value at ``ts_us`` (a counter holds its last value)."""
    before = [p for p in points if p["ts"] <= ts_us and key in p["args"]]
    return float(before[-1]["args"][key])


def us(t_s: float) -> float:
    return t_s * 1e6


def gpu_label(node_index: int, gpu: int) -> str:
    """The counter name of a fixture GPU (its manifest index and short UUID)."""
    return f"GPU {gpu} ({short_device(gpu_uuid(node_index, gpu))})"


def test_nodes_ranks_steps_waits_and_counters(tmp_path: Path) -> None:
    fixture, report = built(
        tmp_path, NodeSpec("node1", gpus=2), NodeSpec("node2", gpus=2), steps=10
    )
    files = write_report(report)
    assert files.trace_json == fixture.run_dir / "report" / "trace.json.gz"
    assert files.trace is not None and files.trace.resolution == "buckets"
    assert not list(files.directory.glob("*.part"))
    trace = read_trace(files.trace_json)

    node_pid = {"node1": PID_BASE, "node2": PID_BASE + 1}
    assert names(trace, "process_name") == {(pid, pid): n for n, pid in node_pid.items()}
    ranks = {0: "node1", 1: "node1", 2: "node2", 3: "node2"}
    assert names(trace, "thread_name") == {
        (node_pid[node], TID_BASE + rank): f"rank {rank}" for rank, node in ranks.items()
    }

    by_thread: dict[tuple[int, int], list[Event]] = defaultdict(list)
    for event in slices(trace):
        by_thread[(event["pid"], event["tid"])].append(event)
    spec = fixture.spec
    for rank, node in ranks.items():
        events = {e["name"]: e for e in by_thread[(node_pid[node], TID_BASE + rank)]}
        steps = {n for n in events if n.startswith("step ")}
        assert steps == {f"step {s}" for s in fixture.steps}
        for step, (begin_s, end_s) in fixture.steps.items():
            event = events[f"step {step}"]
            assert event["cat"] == "step"
            assert event["ts"] == pytest.approx(us(begin_s), abs=1)
            assert event["dur"] == pytest.approx(us(end_s - begin_s), abs=1)
            assert event["args"]["step"] == step
            assert event["args"]["tokens"] == spec.tokens_per_step // 4
            assert event["args"]["loss"] == pytest.approx(5.0 / step)
        for step, exit_s in fixture.barriers.items():
            event = events[f"barrier {step} wait"]
            assert event["cat"] == "barrier"
            assert event["ts"] == pytest.approx(us(exit_s - spec.barrier_s), abs=1)
            assert event["ts"] + event["dur"] == pytest.approx(us(exit_s), abs=1)
            assert event["args"]["wait_s"] == pytest.approx(spec.barrier_s)
    assert len(slices(trace)) == files.trace.slices == 4 * (10 + 2)

    # Slices on a rank's track nest (here: never overlap), as Perfetto requires.
    for events in by_thread.values():
        ordered = sorted(events, key=lambda e: e["ts"])
        for before, after in zip(ordered, ordered[1:], strict=False):
            assert after["ts"] >= before["ts"] + before["dur"]

    start_us, end_us = us(fixture.window_s[0]), us(fixture.window_s[1])
    for event in trace["traceEvents"]:
        if event["ph"] != "M":
            assert start_us - 1 <= event["ts"] <= end_us + 1
    for node_index, pid in enumerate(node_pid.values()):
        # Bucket means: the busy and idle levels, and a mix where a bucket spans both.
        host = sorted(p["args"]["power_w"] for p in counters(trace, pid, "host"))
        assert (host[0], host[-1]) == (spec.host_idle_w, spec.host_busy_w)
        for gpu in range(2):
            label = gpu_label(node_index, gpu)
            points = counters(trace, pid, label)
            assert points, label
            ts = [p["ts"] for p in points]
            assert ts == sorted(set(ts))  # one point per time, in order
            assert all(
                set(p["args"]) == {"power_w", "sm_clock_mhz", "temperature_c"} for p in points
            )
            powers = sorted(p["args"]["power_w"] for p in points)
            assert (powers[0], powers[-1]) == (
                spec.gpu_idle_w + 5 * gpu,
                spec.gpu_busy_w + 10 * gpu,
            )
            # A point equal to the one before is left out.
            assert all(a["args"] != b["args"] for a, b in zip(points, points[1:], strict=False))
    assert sum(e["ph"] == "C" for e in trace["traceEvents"]) == files.trace.counter_points


def test_phases_nest_in_their_steps_and_own_events_are_instants(tmp_path: Path) -> None:
    phases = ("forward", "backward", "optimizer")
    fixture, report = built(
        tmp_path,
        NodeSpec("node1", gpus=1),
        NodeSpec("node2", gpus=1),
        steps=6,
        barrier_every=3,
        phases=phases,
        late_rank=1,
        marks=("eval",),
    )
    files = write_report(report)
    assert files.trace_json is not None and files.trace is not None
    trace = read_trace(files.trace_json)
    spec = fixture.spec
    by_thread: dict[int, list[Event]] = defaultdict(list)
    for event in slices(trace):
        by_thread[event["tid"] - TID_BASE].append(event)
    part_s = spec.step_s / len(phases)
    for rank, events in by_thread.items():
        steps = {e["args"]["step"]: e for e in events if e["cat"] == "step"}
        mine = [e for e in events if e["cat"] == "phase"]
        assert sorted((e["args"]["step"], e["name"]) for e in mine) == sorted(
            (s, name) for s in fixture.steps for name in phases
        )
        for event in mine:
            step = steps[event["args"]["step"]]
            assert step["ts"] <= event["ts"] <= event["ts"] + event["dur"]
            assert event["ts"] + event["dur"] <= step["ts"] + step["dur"]
            late = spec.late_s if (rank, event["name"]) == (1, "backward") else 0.0
            begin_s = fixture.steps[event["args"]["step"]][0] + phases.index(event["name"]) * part_s
            assert event["ts"] == pytest.approx(us(begin_s + late), abs=1)
        # Slices on a rank's track nest as Perfetto requires: each inside or after another.
        ordered = sorted(events, key=lambda e: (e["ts"], -e["dur"]))
        open_ends: list[int] = []
        for event in ordered:
            while open_ends and open_ends[-1] <= event["ts"]:
                open_ends.pop()
            assert not open_ends or event["ts"] + event["dur"] <= open_ends[-1], event
            open_ends.append(event["ts"] + event["dur"])
    instants = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert {(e["name"], e["cat"]) for e in instants} == {("eval", "mark")}
    assert sorted((e["tid"] - TID_BASE, e["args"]["step"]) for e in instants) == [
        (rank, s) for rank in (0, 1) for s in sorted(fixture.steps)
    ]
    for event in instants:
        assert event["ts"] == pytest.approx(us(fixture.steps[event["args"]["step"]][1]), abs=1)
    full = 2 * (6 + 6 * len(phases) + 2)
    assert files.trace.slices == len(slices(trace)) == full and files.trace.instants == 12
    assert (
        trace["otherData"]["slices"]
        == f"every step, phase and barrier wait of 2 ranks ({full} slices)"
    )

    # Over the cap, a step's phases and own events go with it.
    exported = write_trace(report, tmp_path / "capped.json.gz", max_slices=20)
    capped = read_trace(exported.path)
    kept = {e["args"]["step"] for e in slices(capped) if e["cat"] == "step"}
    assert exported.plan.step_every > 1 and kept == set(range(1, 7, exported.plan.step_every))
    assert {e["args"]["step"] for e in slices(capped) if e["cat"] == "phase"} == kept
    assert {e["args"]["step"] for e in capped["traceEvents"] if e["ph"] == "i"} == kept
    assert exported.slices == len(slices(capped)) <= 20
    assert "step (with its phases) and every barrier wait" in capped["otherData"]["slices"]


def test_a_skewed_clock_is_corrected(tmp_path: Path) -> None:
    fixture, report = built(
        tmp_path,
        NodeSpec("node1", gpus=1),
        NodeSpec("node2", gpus=1, offset_s=5.0),
        NodeSpec("node3", gpus=1, offset_s=-2.5),
        steps=10,
    )
    trace = read_trace(write_trace(report, tmp_path / "trace.json.gz").path)
    begins: dict[str, list[int]] = defaultdict(list)
    for event in slices(trace):
        begins[event["name"]].append(event["ts"])
    for step, (begin_s, _) in fixture.steps.items():
        ts = begins[f"step {step}"]
        assert len(ts) == 3  # one rank per node
        assert max(ts) - min(ts) <= 1
        assert ts[0] == pytest.approx(us(begin_s), abs=1)

    # node2's power rises at each step's start on the head's clock: within one bucket
    # in the default export ...
    spec = fixture.spec
    width_us = us(report.window.duration_s) / len(
        report.nodes["node2"].devices[gpu_uuid(1, 0)].view.buckets.middle_s  # type: ignore[union-attr]
    )
    points = counters(trace, PID_BASE + 1, gpu_label(1, 0))
    after_barrier = [s + 1 for s in fixture.barriers if s + 1 in fixture.steps]
    assert after_barrier
    for step in after_barrier:
        begin_us = us(fixture.steps[step][0])
        rise = min(
            p["ts"]
            for p in points
            if p["ts"] > begin_us - us(0.25) and p["args"]["power_w"] > spec.gpu_idle_w
        )
        assert begin_us - width_us <= rise <= begin_us + 1
        assert value_at(points, begin_us - us(0.15)) == spec.gpu_idle_w

    # ... and at the very sample with every sample of a window.
    window = TraceWindow(0.0, report.window.duration_s)
    full = read_trace(write_trace(report, tmp_path / "full.json.gz", window).path)
    points = counters(full, PID_BASE + 1, gpu_label(1, 0))
    for step, (begin_s, _) in fixture.steps.items():
        begin_us = us(begin_s)
        [at] = [p for p in points if abs(p["ts"] - begin_us) <= 1]
        assert at["args"]["power_w"] == spec.gpu_busy_w
        if step in after_barrier:
            assert value_at(points, begin_us - 2) == spec.gpu_idle_w


def test_slices_over_the_cap_keep_every_kth_step_and_every_wait(tmp_path: Path) -> None:
    fixture, report = built(
        tmp_path, NodeSpec("node1", gpus=2), NodeSpec("node2", gpus=2), steps=20
    )
    full = 4 * 20 + 4 * 4  # 4 ranks: 20 steps and 4 barriers each
    exported = write_trace(report, tmp_path / "trace.json.gz", max_slices=40)
    trace = read_trace(exported.path)
    kept = {e["args"]["step"] for e in slices(trace) if e["cat"] == "step"}
    assert exported.plan.capped and exported.plan.step_every > 1
    step_every = exported.plan.step_every
    assert kept == set(range(1, 21, step_every))
    waits = [e for e in slices(trace) if e["cat"] == "barrier"]
    assert len(waits) == 16  # every barrier wait
    assert exported.slices == len(slices(trace)) <= 40 < full
    assert f"{full:,} slices exceed the cap of 40" in trace["otherData"]["slices"]
    assert any("exceed the cap" in note for note in exported.notes)

    # Waits alone over half the cap: every k-th barrier too, and still within it.
    exported = write_trace(report, tmp_path / "small.json.gz", max_slices=10)
    trace = read_trace(exported.path)
    barriers = {e["args"]["step"] for e in slices(trace) if e["cat"] == "barrier"}
    assert exported.plan.barrier_every > 1
    assert barriers == set(sorted(fixture.barriers)[:: exported.plan.barrier_every])
    assert 0 < exported.slices == len(slices(trace)) <= 10

    exported = write_trace(report, tmp_path / "all.json.gz", max_slices=full)
    assert not exported.plan.capped and exported.slices == full and not exported.notes


def test_a_window_exports_every_sample_inside_it(tmp_path: Path) -> None:
    fixture, report = built(
        tmp_path,
        NodeSpec("node1", gpus=1),
        NodeSpec("node2", gpus=1, offset_s=3.0),
        steps=20,
        power_rate_hz=20.0,
    )
    window = TraceWindow(2.0, 4.5)
    exported = write_trace(report, tmp_path / "trace.json.gz", window)
    assert exported.resolution == "samples"
    trace = read_trace(exported.path)
    lo_s = report.window.start_s + window.start_s
    hi_s = report.window.start_s + window.end_s
    for node_index, node in enumerate(("node1", "node2")):
        truth = fixture.devices[(node, gpu_uuid(node_index, 0))]
        inside = truth.power_t_s[(truth.power_t_s >= lo_s - 1e-6) & (truth.power_t_s <= hi_s)]
        points = counters(trace, PID_BASE + node_index, gpu_label(node_index, 0))
        assert [p["ts"] for p in points] == pytest.approx([us(t) for t in inside], abs=1)
        # Fast power-only readings carry power alone; full readings carry all three.
        assert {tuple(sorted(p["args"])) for p in points} == {
            ("power_w",),
            ("power_w", "sm_clock_mhz", "temperature_c"),
        }
        host = counters(trace, PID_BASE + node_index, "host")
        host_truth = fixture.devices[(node, "host")].power_t_s
        assert len(host) == int(((host_truth >= lo_s - 1e-6) & (host_truth <= hi_s)).sum())
    # Far more points than the default export has in the same span.
    default = read_trace(write_trace(report, tmp_path / "default.json.gz").path)
    label = gpu_label(0, 0)
    in_span = [p for p in counters(default, PID_BASE, label) if us(lo_s) <= p["ts"] <= us(hi_s)]
    assert len(counters(trace, PID_BASE, label)) > 2 * len(in_span)

    expected = {f"step {s}" for s, (b, e) in fixture.steps.items() if b <= hi_s and e >= lo_s} | {
        f"barrier {s} wait"
        for s, t in fixture.barriers.items()
        if t - fixture.spec.barrier_s <= hi_s and t >= lo_s
    }
    assert expected and {e["name"] for e in slices(trace)} == expected
    assert exported.slices == 2 * len(expected)  # both ranks
    assert "every sample" in trace["otherData"]["counters"]
    assert trace["otherData"]["span"].endswith("(2.000:4.500)")


def test_a_restarted_run_exports_the_latest_attempt(tmp_path: Path) -> None:
    fixture, report = built(
        tmp_path, NodeSpec("node1", gpus=2), steps=12, restart_after=8, resume_from=5
    )
    trace = read_trace(write_trace(report, tmp_path / "trace.json.gz").path)
    for rank in (0, 1):
        steps = [e for e in slices(trace) if e["tid"] == TID_BASE + rank and e["cat"] == "step"]
        # Steps 6 to 8 ran twice: only the attempt that completed the run is shown.
        assert sorted(e["args"]["step"] for e in steps) == sorted(fixture.steps)
        for event in steps:
            begin_s, end_s = fixture.steps[event["args"]["step"]]
            assert event["ts"] == pytest.approx(us(begin_s), abs=1)
            assert event["ts"] + event["dur"] == pytest.approx(us(end_s), abs=1)


def test_a_torn_marker_file_gives_the_same_slices(tmp_path: Path) -> None:
    fixture, report = built(
        tmp_path, NodeSpec("node1", gpus=2), NodeSpec("node2", gpus=1, offset_s=4.0)
    )
    whole = slices(read_trace(write_trace(report, tmp_path / "whole.json.gz").path))
    for path in report.data.marker_files:  # a killed trainer's last, half-written line
        with path.open("a") as out:
            out.write('{"v": 1, "event": "step_begin", "step": 99, "wall_s": 17')
    report = build_report(fixture.run_dir)
    torn = slices(read_trace(write_trace(report, tmp_path / "torn.json.gz").path))
    assert torn == whole and len(whole) == 3 * (20 + 4)


@pytest.mark.parametrize("text", ["5", "a:b", "3:2", "2:2", "nan:1", "1:inf", ""])
def test_a_bad_window_is_refused(text: str) -> None:
    with pytest.raises(ReportError, match="trace window"):
        TraceWindow.parse(text)


def test_window_parses_seconds() -> None:
    assert TraceWindow.parse("120:180.5") == TraceWindow(120.0, 180.5)
    assert TraceWindow.parse("-1.5:2") == TraceWindow(-1.5, 2.0)


def test_cli_trace_options(tmp_path: Path) -> None:
    fixture = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1", gpus=1)]))
    trace_path = fixture.run_dir / "report" / "trace.json.gz"
    result = CliRunner().invoke(report_cmd, [str(fixture.run_dir), "--no-trace"])
    assert result.exit_code == 0, result.output
    assert not trace_path.exists() and "trace:" not in result.output

    result = CliRunner().invoke(report_cmd, [str(fixture.run_dir)])
    assert result.exit_code == 0, result.output
    assert f"trace:  {trace_path}" in result.output
    assert read_trace(trace_path)["otherData"]["counters"].startswith("means over buckets")

    result = CliRunner().invoke(
        report_cmd, [str(fixture.run_dir), "--no-trace", "--trace-window", "1:2"]
    )
    assert result.exit_code == 0, result.output
    assert read_trace(trace_path)["otherData"]["counters"] == "every sample in the span"

    result = CliRunner().invoke(report_cmd, [str(fixture.run_dir), "--trace-window", "2:1"])
    assert result.exit_code == 2
    assert "END must be after START" in result.output
