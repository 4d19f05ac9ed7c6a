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
from toolkit.telemetry.report.figures.marker_phases import MarkerPhase
from toolkit.telemetry.report.inputs.timeline import StepsFrom
from toolkit.telemetry.report.terminal import WIDTH, phase_lines, short_device, steps_from_line


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


def test_how_the_steps_were_found_is_said_and_mixed_ways_too(many: Report) -> None:
    assert steps_from_line(many) is None and "steps:" not in format_summary(many)
    one = replace(many, timeline=replace(many.timeline, steps_from=StepsFrom({"auto": 12}, 0)))
    assert steps_from_line(one) == (f"steps: {many.run.steps}, from optimizer hooks (--auto-steps)")
    lines = format_summary(one).splitlines()
    assert lines[4] == steps_from_line(one)  # just below the run's line
    mixed = replace(
        many,
        timeline=replace(
            many.timeline, steps_from=StepsFrom({"hf": 900, "lightning": 99, "x" * 80: 1}, 24)
        ),
    )
    line = steps_from_line(mixed)
    assert line is not None and "found differently across ranks" in line
    assert "the Hugging Face Trainer callback on 900 ranks" in line
    assert "nothing said on 24 ranks" in line
    text = format_summary(mixed)
    assert max(len(line) for line in text.splitlines()) <= WIDTH + 2


def test_marked_phases_fit_two_lines_at_any_rank_count(many: Report) -> None:
    assert phase_lines(many) == []
    phases = [
        MarkerPhase(
            name=f"phase-with-a-long-name-{i}",
            count=10**9,
            ranks=100_000,
            total_s=1e6 - i,
            median_rank_s=12_345.678,
            max_rank_s=98_765.4,
            slowest_rank=99_999,
            energy_j=1.234e12,
        )
        for i in range(30)
    ]
    lines = phase_lines(replace(many, marker_phases=phases))
    assert 1 <= len(lines) <= 2 and max(len(line) for line in lines) <= WIDTH
    assert lines[-1].endswith("more (summary.json)")
    shown = sum(line.count("(99999;") for line in lines)
    assert f"and {len(phases) - shown} more" in lines[-1]
    assert lines[0].startswith("phases, per rank median/max s (slowest rank; energy):")
    assert "phase-with-a-long-na 12,346/98,765 (99999; 1.23 TJ)" in "\n".join(lines)
    few = phase_lines(replace(many, marker_phases=phases[:1]))
    assert len(few) == 2 and "more" not in few[1]  # a name this long goes on its own line
    usual = [
        replace(phases[0], name=name, median_rank_s=1.67, max_rank_s=2.5, slowest_rank=7)
        for name in ("forward", "backward", "optimizer", "data")
    ]
    lines = phase_lines(replace(many, marker_phases=usual))
    assert len(lines) == 2 and "more" not in lines[1] and "data 1.67/2.5 (7; 1.23 TJ)" in lines[1]
    text = format_summary(replace(many, marker_phases=phases))
    assert max(len(line) for line in text.splitlines()) <= WIDTH + 2
