"""page/html.py: report.html is offline and folds its long tables.

The 12-node run of conftest.py's ``many``: node004's sampler dies at 6 s, node006's GPU
counters count 40% more than their power, node008 throttles from 2 s to 8 s. Expected
figures come from the report's own numbers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from toolkit.telemetry.report import Report, write_report
from toolkit.telemetry.report.page.canvas_data import page_data


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
