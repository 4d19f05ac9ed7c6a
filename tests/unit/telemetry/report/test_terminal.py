"""terminal.py: the terminal summary (rtk report), grouped, outliers named, notes capped.

The 12-node run of conftest.py's ``many``: node004's sampler dies at 6 s, node006's GPU
counters count 40% more than their power, node008 throttles from 2 s to 8 s. Expected
figures come from the report's own numbers.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner
from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.cli.cmd_report import report_cmd
from toolkit.telemetry.report import Report, format_summary
from toolkit.telemetry.report.terminal import WIDTH, short_device


def test_the_summary_groups_nodes_and_names_the_outliers(many: Report) -> None:
    text = format_summary(many)
    lines = text.splitlines()
    assert len(lines) <= 40 and max(len(line) for line in lines) <= WIDTH + 2
    # Run totals come first.
    assert lines[3].startswith("run: ") and lines[4].startswith("energy: ")
    group = next(line for line in lines if "(9 nodes)" in line)
    assert group.lstrip().startswith("node001-node003, node005, node007, node009-node012")
    assert "all complete" in group
    assert any(line.lstrip().startswith("node004:") and "lost" in line for line in lines)
    assert (
        f"GPUs ({2 * len(many.nodes)}, counter)" in text
        and f"hosts ({len(many.nodes)}, modelled)" in text
    )
    outliers = lines[lines.index(next(x for x in lines if x.startswith("outliers"))) :]
    assert any("node006 (all 2): energy" in line and "+40%" in line for line in outliers)
    assert any("node008 (all 2): throttled 6.0 s" in line for line in outliers)
    # No line per device: the device table is for --all.
    assert "GPU-00050000" not in text.split("outliers")[0]
    everything = format_summary(many, show_all=True)
    for node in many.nodes.values():
        for device in node.devices:
            assert f"{node.name}/{short_device(device)}" in everything
    assert len(everything.splitlines()) > len(lines) + 2 * len(many.nodes)


def test_notes_are_capped_unless_all_are_asked_for(many: Report) -> None:
    notes = [f"note number {i}: " + "word " * 12 for i in range(30)]
    report = replace(many, notes=notes)
    text = format_summary(report)
    shown = [n for n in notes if n.split(":")[0] + ":" in text]
    assert 1 <= len(shown) < len(notes)
    assert f"... and {len(notes) - len(shown)} more notes, see summary.json" in text
    everything = format_summary(report, show_all=True)
    assert all(n.split(":")[0] + ":" in everything for n in notes)


def test_cli_all_prints_every_device(many: Report) -> None:
    compact = CliRunner().invoke(report_cmd, [str(many.run_dir)])
    everything = CliRunner().invoke(report_cmd, [str(many.run_dir), "--all"])
    assert compact.exit_code == 0 and everything.exit_code == 0, everything.output
    assert "GPU-000b0001" not in compact.output and "node012/GPU-000b0001" in everything.output
    assert len(compact.output.splitlines()) <= 42


def test_cli_prints_the_summary(tmp_path: Path) -> None:
    fixture = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1", gpus=1)]))
    result = CliRunner().invoke(report_cmd, [str(fixture.run_dir)])
    assert result.exit_code == 0, result.output
    assert "node1" in result.output and "J/token" in result.output
    assert f"report: {fixture.run_dir / 'report' / 'report.html'}" in result.output
    # Every line fits 100 columns but for the run's path, which is the user's to choose.
    lines = [line.replace(str(fixture.run_dir), "RUN") for line in result.output.splitlines()]
    assert max(len(line) for line in lines) <= 100

    result = CliRunner().invoke(report_cmd, [str(fixture.run_dir), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["run"]["steps"] == fixture.spec.steps
