"""After a run: say where its results came from, and print the report (the run's events)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from toolkit.cli.output.jobs import outcome_lines
from toolkit.flows import CollectOutcome, ReportOutcome, WorkloadOutcome
from toolkit.flows.recorded import RunCheck, run_recorded
from toolkit.flows.run import RunEvents
from toolkit.inventory import Inventory
from toolkit.workloads import Workload


def render_collect(collected: CollectOutcome, fetched: bool = True) -> None:
    """Say where the results came from, or why they are not here (stderr)."""
    path = collected.run_dir
    if collected.error is not None:
        click.echo(f"rtk: could not bring the run's results here: {collected.error}", err=True)
    elif not collected.writable:
        click.echo(f"rtk: cannot write {path} or ./{path.name} here for the results", err=True)
    elif collected.copied is not None:
        click.echo(
            f"rtk: copied {len(collected.copied)} result file(s) from the head into "
            f"{collected.path}",
            err=True,
        )
    elif collected.path is None and not fetched:
        click.echo(f"rtk: no telemetry under {path} on this machine", err=True)


def render_report(reported: ReportOutcome) -> Path | None:
    """Print the report's summary and where report.html is; returns that path."""
    if reported.error is not None:
        click.echo(f"rtk: report: {reported.error}", err=True)
        return None
    if reported.summary is not None:
        click.echo(reported.summary)
    if reported.html is not None:
        click.echo(f"report: {reported.html}")
    return reported.html


class RecordEvents(RunEvents):
    """What ``rtk telemetry record`` prints between its steps."""

    def job(self, outcome: WorkloadOutcome) -> None:
        """How the command's job ended."""
        for line in outcome_lines(outcome.job, outcome.request.run_dir):
            click.echo(f"rtk: {line}", err=True)

    def collected(self, outcome: CollectOutcome) -> None:
        """Where the telemetry came from."""
        render_collect(outcome)

    def reported(self, outcome: ReportOutcome) -> None:
        """The report's summary and where report.html is."""
        render_report(outcome)


def record_and_report(
    inventory: Inventory, workload: Workload, dry_run: bool, check: RunCheck | None = None
) -> None:
    """``rtk telemetry record``'s and ``rtk torchrun``'s run, printed as it goes.

    ``--dry-run`` prints the plan instead; ``check`` runs first either way. Exits 1
    when the job did not succeed.
    """
    show = (lambda text: click.echo(text, nl=False)) if dry_run else None
    done = run_recorded(inventory, workload, RecordEvents(), click.echo, check, show)
    if done is not None and not done.ok:
        sys.exit(1)
