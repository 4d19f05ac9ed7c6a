"""``rtk report RUN_DIR``: a run's power telemetry as figures, tables and plots."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import click

from toolkit.cli.options.decorators import print_json
from toolkit.rundir import RunDir

if TYPE_CHECKING:
    from toolkit.telemetry.report.trace.export import TraceWindow

REPORT_HELP = """Report a run's power telemetry: energy per node, device, step and token.

\b
RUN_DIR is a run directory of `rtk train --telemetry` (see docs/telemetry.md), or
its report folder RUN_DIR/report (the report is then rebuilt in place). The
samples of every node are put on the head node's clock (clock offsets from the
manifest) and lined up with the trainer's markers; energy comes from the GPU energy
counter where there is one, else from integrated power. Gaps in the samples (a lost
node, a stalled sampler) are shown, never filled in.

\b
Writes RUN_DIR/report/: summary.json (every figure), plots/*.png (power, a
heatmap of every GPU by time, each GPU against the cluster's median, energy per step,
utilisation), report.html (self-contained: open it offline) and trace.json.gz (the
aligned timeline for ui.perfetto.dev: each rank's steps and barrier waits, each GPU's
power, clock and temperature); prints a summary that fits a screen at any cluster
size: run totals, alike nodes grouped on one line, the devices that stand out. Nodes
are read one at a time, so memory follows the largest node's trace, not the
cluster's size.
  rtk report ~/rtk-runs/mycluster-20260101-120000
  rtk report RUN_DIR --json          the summary as JSON on stdout
  rtk report RUN_DIR --all           every node, device, check and note in the summary
  rtk report RUN_DIR --csv           also traces.csv: every sample on the aligned timeline
  rtk report RUN_DIR --trace-window 120:180
                                     the trace of 2 minutes, every sample in them
"""

ALL_HELP = (
    "Print every node, device, outlier, cross-check and note (the summary groups alike "
    "nodes and shows the first few otherwise)."
)
JSON_HELP = "Print summary.json's content instead of the text summary."
CSV_HELP = (
    "Also write report/traces.csv, every sample on the head's timeline (about 10x the "
    "size of the traces, which hold the same samples)."
)

TRACE_HELP = (
    "Write report/trace.json.gz, the aligned timeline in Chrome trace-event format "
    "(open it in ui.perfetto.dev). Its size is bounded: counters at the report's bucket "
    "resolution, and over 250,000 slices only every k-th step."
)
TRACE_WINDOW_HELP = (
    "Export only START:END (seconds since the run's start) to the trace, with every "
    "sample and every slice in it (the slice cap still applies to a long span); "
    "implies --trace."
)


def _trace_window(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> TraceWindow | None:
    if value is None:
        return None
    from toolkit.telemetry.report import ReportError
    from toolkit.telemetry.report.trace.export import TraceWindow

    try:
        return TraceWindow.parse(value)
    except ReportError as e:
        raise click.BadParameter(str(e)) from e


@click.command("report", help=REPORT_HELP)
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.option("--all", "-v", "--verbose", "show_all", is_flag=True, help=ALL_HELP)
@click.option("--csv", "csv", is_flag=True, help=CSV_HELP)
@click.option("--trace/--no-trace", default=True, show_default=True, help=TRACE_HELP)
@click.option(
    "--trace-window",
    metavar="START:END",
    callback=_trace_window,
    help=TRACE_WINDOW_HELP,
)
def report_cmd(
    run_dir: Path,
    as_json: bool,
    show_all: bool,
    csv: bool,
    trace: bool,
    trace_window: TraceWindow | None,
) -> None:
    """Build and write a run's report (help: REPORT_HELP)."""
    # Imported here: numpy and matplotlib would slow every other rtk command's start.
    from toolkit.telemetry.report import build_report, format_summary, summary_dict, write_report

    report = build_report(RunDir.find(run_dir).root)
    files = write_report(report, csv=csv, trace=trace, trace_window=trace_window)
    if as_json:
        print_json(summary_dict(report))
        return
    click.echo(format_summary(report, show_all=show_all))
    click.echo(f"\nreport: {files.html}")
    if files.trace is not None:
        click.echo(f"trace:  {files.trace.path}")
        for note in files.trace.notes:
            click.echo(textwrap.fill(note, 100, initial_indent="  ", subsequent_indent="    "))
