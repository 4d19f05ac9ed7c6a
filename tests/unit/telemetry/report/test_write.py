"""write.py: every file of <run_dir>/report/ (summary.json, traces.csv, PNGs, report.html).

Synthetic, format-exact run directories (tests/telemetry_fixtures.py); expected figures
are computed from the samples the fixture wrote, never typed in.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
from pathlib import Path

import matplotlib.image
import pytest
from telemetry_fixtures import BuiltRun, NodeSpec, RunSpec, build_run

from toolkit.rundir.traces import read_table
from toolkit.telemetry.report import (
    Report,
    build_report,
    format_summary,
    summary_dict,
    write_report,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def built(tmp_path: Path, *nodes: NodeSpec, **run: object) -> tuple[BuiltRun, Report]:
    fixture = build_run(tmp_path, RunSpec(nodes=list(nodes), **run))  # type: ignore[arg-type]
    return fixture, build_report(fixture.run_dir)


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


GOLDEN = Path(__file__).resolve().parents[3] / "golden"
OLD_RUNS = {
    "report-old-run": RunSpec(
        nodes=[NodeSpec("node1", gpus=2), NodeSpec("node2", gpus=1, offset_s=-1.5)],
        steps=10,
        straggler_rank=2,
    ),
    "report-old-run-no-barriers": RunSpec(
        nodes=[NodeSpec("node1", gpus=2)], steps=6, barrier_every=0
    ),
}


@pytest.mark.parametrize("name", sorted(OLD_RUNS))
def test_a_run_without_the_new_marker_events_writes_the_same_files(
    tmp_path: Path, name: str
) -> None:
    """A run of run_start/step/barrier/run_end markers only (as before phases, user events
    and steps_from): summary.json, the terminal text, the page and the trace's events are
    pinned whole (set RTK_UPDATE_GOLDEN=1 to rewrite, deliberately)."""
    fixture = build_run(tmp_path, OLD_RUNS[name])
    report = build_report(fixture.run_dir)
    files = write_report(report)
    assert files.trace_json is not None
    written = {
        "summary.json": files.summary_json.read_text(),
        "terminal.txt": format_summary(report) + "\n",
        "report.html": files.html.read_text(),
        "trace.json": gzip.decompress(files.trace_json.read_bytes()).decode(),
    }
    for file, text in written.items():
        text = text.replace(str(fixture.run_dir), "RUN_DIR")
        path = GOLDEN / name / file
        if os.environ.get("RTK_UPDATE_GOLDEN"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        assert text == path.read_text(encoding="utf-8"), f"{name}/{file}"
