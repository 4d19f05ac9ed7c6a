"""A run with a power policy: its report says what the policy tried and kept, everywhere.

A synthetic run directory (tests/telemetry_fixtures.py) given a ``power.jsonl`` written
by rtk's own recorder: the terminal lines, summary.json's ``power_policy``, the HTML's
section and table, and power_policy.png. A run without one gets none of them.
"""

from __future__ import annotations

import json
from pathlib import Path

from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.power.records import PowerRecorder
from toolkit.power.windows import Decision, GpuKey, GpuRange, Window
from toolkit.rundir import RunDir
from toolkit.telemetry.report import build_report, format_summary, write_report

GPU = GpuKey("node1", 0)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _record(run_dir: Path) -> None:
    recorder = PowerRecorder(RunDir(run_dir).power)
    recorder.start(1.0, "optimize", {"policy": "optimize"}, {GPU: GpuRange(200, 700, 700)})
    windows = [(700.0, 1.00, 500.0, False), (600.0, 1.01, 440.0, False),
               (500.0, 1.04, 400.0, False), (500.0, 1.03, 395.0, True)]  # fmt: skip
    recorder.decision(1.0, Decision({GPU: 700.0}, "warm-up", 10), per_gpu=True)
    for first, (limit, step_s, joules, settled) in enumerate(windows):
        window = Window({GPU: limit}, 10, step_s, {GPU: joules * 10})
        recorder.window(2.0 + first, first * 10 + 1, window, per_gpu=not settled)
        reason = "chose 500 W" if first >= 2 else f"profiling {limit - 100:.0f} W"
        recorder.decision(2.0 + first, Decision({GPU: 500.0}, reason, 10, first >= 2), True)


def test_the_report_shows_the_policys_curve_choice_and_savings(tmp_path: Path) -> None:
    fixture = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1", gpus=1)]))
    _record(fixture.run_dir)
    report = build_report(fixture.run_dir)
    text = format_summary(report)
    assert "power policy optimize on 1 GPU(s): kept 500 W (mean) after 4 window(s)" in text
    assert "21.0% less energy per step, +3.0% time per step" in " ".join(text.split())
    files = write_report(report)
    summary = json.loads(files.summary_json.read_text())
    power = summary["power_policy"]
    assert power["policy"] == "optimize" and len(power["windows"]) == 4
    assert power["kept"]["mean_limit_w"] == 500.0
    page = files.html.read_text()
    assert "<h2>Power limits (optimize)</h2>" in page and 'id="power-windows"' in page
    png = files.directory / "plots" / "power_policy.png"
    assert png.read_bytes().startswith(PNG_SIGNATURE) and "power_policy" in files.plots


def test_a_run_without_a_power_policy_has_no_trace_of_one(tmp_path: Path) -> None:
    fixture = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1", gpus=1)]))
    report = build_report(fixture.run_dir)
    assert report.power is None and "power policy" not in format_summary(report)
    files = write_report(report)
    assert "power_policy" not in json.loads(files.summary_json.read_text())
    assert "Power limits" not in files.html.read_text()
    assert "power_policy" not in files.plots
