"""``write_report``: the report's files in ``<run_dir>/report/``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from toolkit.rundir import RunDir
from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.page.html import render_html
from toolkit.telemetry.report.summary_json import summary_dict
from toolkit.telemetry.report.trace.export import (
    TRACE_FILE,
    TraceExport,
    TraceWindow,
    write_trace,
)
from toolkit.telemetry.report.traces_csv import write_traces


@dataclass(frozen=True)
class ReportFiles:
    """Where the report's files went.

    Attributes:
        directory: The report directory.
        summary_json: Every figure, as JSON.
        traces_csv: Every sample on the aligned timeline, when asked for.
        html: The page with the tables and the plots.
        plots: Plot name (``plots.PLOTS``: power, heatmap, distribution, step_energy,
            utilization) -> PNG.
        trace_json: The Perfetto / Chrome trace-event file (gzip JSON), unless turned off.
        trace: What the trace holds (its span, resolution, what the slice cap left out).
    """

    directory: Path
    summary_json: Path
    traces_csv: Path | None
    html: Path
    plots: dict[str, Path]
    trace_json: Path | None = None
    trace: TraceExport | None = None


def write_report(
    report: Report,
    out_dir: Path | None = None,
    csv: bool = False,
    trace: bool = True,
    trace_window: TraceWindow | None = None,
) -> ReportFiles:
    """Write summary.json, plots/*.png, report.html, trace.json.gz, and traces.csv when ``csv``.

    Args:
        report: What ``build_report`` returned.
        out_dir: Where to write; ``<run_dir>/report`` by default.
        csv: Also write every sample as CSV (the traces hold them already).
        trace: Write the trace-event file for Perfetto (bounded in size).
        trace_window: Export only this span to the trace, with every sample in it.
    """
    directory = Path(out_dir) if out_dir is not None else RunDir(report.run_dir).report_dir
    directory.mkdir(parents=True, exist_ok=True)
    summary_json = directory / "summary.json"
    summary_json.write_text(
        json.dumps(summary_dict(report), indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    traces_csv = directory / "traces.csv" if csv else None
    if traces_csv is not None:
        write_traces(report, traces_csv)
    # matplotlib is imported here, not with the package: the CLI stays quick to start.
    from toolkit.telemetry.report.plots.draw import write_plots

    plots = write_plots(report, directory / "plots")
    html = directory / "report.html"
    html.write_text(render_html(report, plots, directory), encoding="utf-8")
    exported = None
    if trace or trace_window is not None:
        exported = write_trace(report, directory / TRACE_FILE, trace_window)
    trace_json = exported.path if exported is not None else None
    return ReportFiles(directory, summary_json, traces_csv, html, plots, trace_json, exported)
