"""The report's views for many GPUs: grouped terminal summary, page data, folded tables.

A 12-node run (2 GPUs and a host each): node004's sampler dies at 6 s, node006's GPU
counters count 40% more than their power (its GPUs draw "more"), node008 throttles
from 2 s to 8 s. Expected figures come from the report's own numbers.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.cli.cmd_report import report_cmd
from toolkit.telemetry.report import (
    Report,
    build_report,
    format_summary,
    summary_dict,
    write_report,
)
from toolkit.telemetry.report.alike_nodes import group_nodes
from toolkit.telemetry.report.grid import device_grid, node_power
from toolkit.telemetry.report.page.canvas_data import decode, encode, page_data
from toolkit.telemetry.report.terminal import WIDTH, short_device
from toolkit.telemetry.report.units import joules, value_range, watts

NODES = 12


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Report:
    nodes = [NodeSpec(f"node{i + 1:03d}", gpus=2) for i in range(NODES)]
    nodes[3] = NodeSpec("node004", gpus=2, lost_at_s=6.0)
    nodes[5] = NodeSpec("node006", gpus=2, counter_scale=1.4)
    nodes[7] = NodeSpec("node008", gpus=2, throttle=[(2.0, 8.0, 0x40)])
    fixture = build_run(tmp_path_factory.mktemp("many"), RunSpec(nodes=nodes))
    return build_report(fixture.run_dir)


def test_numbers_read_with_one_unit() -> None:
    assert (joules(812.0), joules(1_234_567.0), watts(5410.0)) == ("812 J", "1.23 MJ", "5.41 kW")
    assert value_range("J", [1.23e6, 1.27e6, None]) == "1.23-1.27 MJ"
    assert (
        value_range("W", [5400.0, 5600.0, 5500.0], median=True) == "5.40-5.60 kW (median 5.50 kW)"
    )
    assert value_range("W", [420.0, 420.04]) == "420 W"
    assert value_range("J", [900.0, 1.5e6]) == "0.00-1.50 MJ"  # one unit: the largest's
    assert value_range("W", [None, float("nan")]) == "-"


def test_alike_nodes_are_grouped_and_the_others_stand_alone(many: Report) -> None:
    named = {"node008"}  # as the outliers name it (all its GPUs throttled)
    groups = group_nodes(list(many.nodes.values()), named)
    [alike] = [g for g in groups if g.alike]
    differ = [g.names for g in groups if not g.alike]
    assert differ == [["node004"], ["node006"], ["node008"]]
    assert alike.names == [n for n in many.nodes if n not in ("node004", "node006", "node008")]
    energies = [n.energy_j for n in alike.nodes]
    assert max(energies) / min(energies) < 1.15
    assert many.nodes["node006"].energy_j > 1.15 * float(np.median(energies))


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
    assert f"GPUs ({2 * NODES}, counter)" in text and f"hosts ({NODES}, modelled)" in text
    outliers = lines[lines.index(next(x for x in lines if x.startswith("outliers"))) :]
    assert any("node006 (all 2): energy" in line and "+40%" in line for line in outliers)
    assert any("node008 (all 2): throttled 6.0 s" in line for line in outliers)
    # No line per device: the device table is for --all.
    assert "GPU-00050000" not in text.split("outliers")[0]
    everything = format_summary(many, show_all=True)
    for node in many.nodes.values():
        for device in node.devices:
            assert f"{node.name}/{short_device(device)}" in everything
    assert len(everything.splitlines()) > len(lines) + 2 * NODES


def test_notes_are_capped_unless_all_are_asked_for(many: Report) -> None:
    notes = [f"note number {i}: " + "word " * 12 for i in range(30)]
    report = replace(many, notes=notes)
    text = format_summary(report)
    shown = [n for n in notes if n.split(":")[0] + ":" in text]
    assert 1 <= len(shown) < len(notes)
    assert f"... and {len(notes) - len(shown)} more notes, see summary.json" in text
    everything = format_summary(report, show_all=True)
    assert all(n.split(":")[0] + ":" in everything for n in notes)


def test_summary_json_has_the_outliers_and_keeps_its_keys(many: Report) -> None:
    summary = summary_dict(many)
    assert list(summary) == [
        "v",
        "run_dir",
        "head",
        "rate_hz",
        "window",
        "run",
        "nodes",
        "cross_check",
        "steps",
        "phases",
        "barriers",
        "stragglers",
        "outliers",
        "notes",
    ]
    found = summary["outliers"]["found"]
    by = {(o["node"], o["device"], o["metric"]) for o in found}
    assert ("node006", None, "energy_j") in by and ("node008", None, "throttled_s") in by
    energy = next(o for o in found if (o["node"], o["metric"]) == ("node006", "energy_j"))
    assert energy["devices"] == 2
    assert energy["median"] == summary["outliers"]["medians"]["gpu"]["energy_j"]
    assert summary["outliers"]["compared"]["gpu"] == 2 * NODES
    json.dumps(summary, allow_nan=False)


def test_quantised_values_come_back_within_a_step() -> None:
    values = np.array([[80.0, 300.5, np.nan, 700.0], [123.4, np.nan, 650.0, 80.0]])
    for width, step in ((2, 620 / 65534), (1, 620 / 254)):
        text = encode(values, 80.0, 700.0, width)
        back = decode(text, 80.0, 700.0, width).reshape(values.shape)
        assert np.array_equal(np.isnan(back), np.isnan(values))
        known = ~np.isnan(values)
        assert np.abs(back[known] - values[known]).max() <= step / 2 + 1e-9


def test_page_data_is_the_grid(many: Report) -> None:
    grid = device_grid(many)
    data = page_data(many, grid)
    gpus = [(n.name, d) for n in many.nodes.values() for d in n.devices if d != "host"]
    assert grid.rows == gpus and len(data["devices"]) == 2 * NODES
    assert data["nodes"] == list(many.nodes) and data["node_rows"][3] == [6, 2]
    assert data["row_node"][6:8] == [3, 3]
    assert [layer["name"] for layer in data["layers"]] == [
        "power_w",
        "sm_clock_mhz",
        "temperature_c",
        "throttled",
        "gpu_util_pct",
    ]
    for layer in data["layers"]:
        back = decode(layer["data"], layer["lo"], layer["hi"], layer["bytes"])
        expected = grid.values[layer["name"]].ravel()
        assert np.array_equal(np.isnan(back), np.isnan(expected))
        span = (layer["hi"] - layer["lo"]) or 1.0
        assert np.nanmax(np.abs(back - expected)) <= span / 254
    # node004 stops at 6 s: its rows are blank after that, the node total too.
    power = grid.values["power_w"]
    late = grid.buckets is not None and int(7.0 / grid.buckets.width_s)
    assert np.isnan(power[6:8, late:]).all() and not np.isnan(power[6:8, :late]).all()
    names, totals = node_power(many)
    assert np.isnan(totals[names.index("node004"), late:]).all()
    assert data["barriers"] == [many.relative_s(b.t_s) for b in many.barriers]


def test_the_page_is_offline_and_folds_long_tables(many: Report, tmp_path: Path) -> None:
    files = write_report(many, tmp_path / "report")
    html = files.html.read_text()
    assert "<script src" not in html and "<link" not in html
    for target in re.findall(r'(?:src|href)="([^"]+)"', html):
        assert "://" not in target and not target.startswith("//"), target
    data = re.search(r'<script type="application/json" id="rtk-data">(.*?)</script>', html, re.S)
    assert data is not None
    assert json.loads(data.group(1))["devices"] == page_data(many)["devices"]
    assert '<canvas id="heatmap"' in html and "window.rtkReport" in html
    # 36 devices: the device table is folded behind a summary, with a filter box.
    devices_at = html.index('<table id="devices">')
    details = html.rindex("<details", 0, devices_at)
    assert html[details : details + len("<details>")] == "<details>"
    assert 'data-table="devices"' in html[details:devices_at]
    assert "full resolution: the traces in <code>telemetry/nodes/</code>" in html.lower()


def test_cli_all_prints_every_device(many: Report) -> None:
    compact = CliRunner().invoke(report_cmd, [str(many.run_dir)])
    everything = CliRunner().invoke(report_cmd, [str(many.run_dir), "--all"])
    assert compact.exit_code == 0 and everything.exit_code == 0, everything.output
    assert "GPU-000b0001" not in compact.output and "node012/GPU-000b0001" in everything.output
    assert len(compact.output.splitlines()) <= 42
