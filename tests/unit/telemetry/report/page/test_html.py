"""page/html.py: report.html is offline and folds its long tables.

The 12-node run of conftest.py's ``many``: node004's sampler dies at 6 s, node006's GPU
counters count 40% more than their power, node008 throttles from 2 s to 8 s. Expected
figures come from the report's own numbers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.telemetry.report import Report, build_report, write_report
from toolkit.telemetry.report.page.canvas_data import page_data
from toolkit.telemetry.report.page.html import significant


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


def test_marked_phases_user_events_and_how_steps_were_found_are_on_the_page(
    many: Report, tmp_path: Path
) -> None:
    old = write_report(many, tmp_path / "old").html.read_text()
    assert 'id="marker-phases"' not in old and 'id="marks"' not in old
    assert 'id="steps-from"' not in old
    spec = RunSpec(
        nodes=[NodeSpec("node1", gpus=1), NodeSpec("node2", gpus=1)],
        steps=4,
        barrier_every=0,
        phases=("forward", "backward"),
        late_rank=1,
        steps_from="lightning",
        marks=("eval <b>",),
    )
    report = build_report(build_run(tmp_path, spec).run_dir)
    html = write_report(report).html.read_text()
    assert '<p id="steps-from">steps: 4, from the Lightning callback</p>' in html
    table = html[
        html.index('<table id="marker-phases">') : html.index(
            "</table>", html.index('<table id="marker-phases">')
        )
    ]
    rows = re.findall(r'<tr><td class="l">([^<]+)</td><td>(\d+)</td><td>(\d+)</td>', table)
    assert rows == [("forward", "8", "2"), ("backward", "8", "2")]
    # The user's names are escaped: the page shows them, never runs them.
    assert "The ranks' own events: eval &lt;b&gt; (8)." in html
    assert "step collectives (from backward phases): 4" in html


@pytest.mark.parametrize(("gpus", "heading"), [(0, "1 host by time"), (1, "1 GPU by time")])
def test_one_row_is_named_in_the_singular(tmp_path: Path, gpus: int, heading: str) -> None:
    run = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1", gpus=gpus)], steps=4))
    html = write_report(build_report(run.run_dir)).html.read_text()
    assert f"<h2>{heading}</h2>" in html


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (3392.0965, "3,392"),
        (0.000294812, "0.0002948"),
        (52.1234, "52.12"),
        (1234567.8, "1,234,568"),
        (0.0, "0"),
        (None, "-"),
    ],
)
def test_rates_are_shown_to_four_significant_figures(value: float | None, shown: str) -> None:
    assert significant(value) == shown
