"""After a run: say where its results came from, and print the report (the run's events)."""

from __future__ import annotations

from pathlib import Path

import click

from toolkit.flows import CollectOutcome, ReportOutcome


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
