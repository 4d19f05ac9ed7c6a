"""A run, looked at: ``rtk report RUN_DIR`` and ``rtk stall-check INVENTORY RUN``.

``rtk report``: a run's power telemetry as figures, tables and plots. ``rtk
stall-check``: where every rank of a running run is, now, and which ranks hold it up.
"""

from __future__ import annotations

import shlex
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import click

from toolkit.cli.options.decorators import (
    choose_inventory,
    dry_run_option,
    local_option,
    print_json,
    slurm_option,
)
from toolkit.cli.options.stall_options import inventory_and_run, run_dir_of
from toolkit.errors import JobError
from toolkit.rundir import RunDir
from toolkit.stall.settings import PER_NODE_TIMEOUT_S, CheckOptions

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


STALL_CHECK_HELP = """Where each rank of a slow or stuck run is, now, and which ranks hold it up.

\b
The stall watchdog of rtk train and rtk torchrun does this by itself once no rank
has finished a step for the stall timeout; stall-check does it when asked: a run
that looks slow, a hang shorter than the timeout, a second look after a stall. A
short Ray job on the head reads when the ranks last finished a step (the marker
files the head sees), asks every node at once for its ranks' Python stacks
(py-spy, else the rank's own faulthandler) and process states, each node within
--per-node-timeout-s, and prints one screen: the last step and the recent step
time, where the ranks are, grouped, and the suspects, most likely first. Every
stack is added to RUN/stall.json (action "check"); --json prints that record.
The run itself is not touched.

\b
RUN is the run directory as the nodes see it (~/rtk-runs/r1, /scratch/runs/r1),
or a bare run id: the run rtk train last started with that id, else
~/rtk-runs/RUN_ID.
  rtk stall-check inv.yaml mycluster-20260101-120000
  rtk stall-check inv.yaml /scratch/runs/r1 --per-node-timeout-s 30
  rtk stall-check inv.yaml r1 --json | jq '.suspects'
  rtk stall-check --local r1 --dry-run            the job it would submit

\b
Exits 0 when the check ran (whatever it found), 1 when it could not (no such run
directory or no markers on the head, or the job failed), 2 on a bad option, 4
when the cluster's Jobs API does not answer (is the cluster up? rtk status), 6
when this machine has no token for the cluster.
"""


@click.command("stall-check", help=STALL_CHECK_HELP)
@click.argument("inventory", required=False, type=click.Path(dir_okay=False))
@click.argument("run", required=False)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the check's record (its stall.json entry, every stack) as JSON on stdout.",
)
@click.option(
    "--per-node-timeout-s",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    default=PER_NODE_TIMEOUT_S,
    show_default=True,
    help="How long each node may take to give its ranks' evidence; a node that takes "
    "longer is named as not answering.",
)
@slurm_option
@local_option
@dry_run_option
def stall_check_cmd(
    inventory: str | None,
    run: str | None,
    as_json: bool,
    per_node_timeout_s: float,
    slurm: bool,
    local: bool,
    dry_run: bool,
) -> None:
    """Check a run for a stall now (help: STALL_CHECK_HELP)."""
    # Imported here: they would slow rtk report's start.
    from toolkit.cli.output.stall_check import CheckLog
    from toolkit.flows import Session
    from toolkit.flows.job_requests import stall_check_request
    from toolkit.jobs.shipped_code import known_same

    inventory, run = inventory_and_run(inventory, run, local)
    inv = choose_inventory(inventory, local, slurm)
    log = CheckLog(lambda line: click.echo(line, err=as_json))
    with Session(inv, log=log.feed) as session:
        state = session.store.load()
        run_dir = run_dir_of(run, state.runs if state is not None else ())
        options = CheckOptions(run_dir, per_node_timeout_s, as_json)
        request = stall_check_request(session.plan, options, ship_code=not known_same(state))
        if dry_run:
            click.echo(request.render(), nl=False)
            return
        outcome = session.run_request(request)
    if not outcome.ok:
        raise JobError(log.failure(outcome, _inventory_words(inventory, local, slurm)))
    if as_json:
        print_json(log.record(outcome.job_id).to_json())


def _inventory_words(inventory: str | None, local: bool, slurm: bool) -> str:
    """How the user named the cluster, for the command rtk suggests (ends in a space)."""
    words = [*(["--local"] if local else []), *(["--slurm"] if slurm else [])]
    words += [shlex.quote(inventory)] if inventory else []
    return "".join(f"{w} " for w in words)
