"""After a run: bring its results here if they are elsewhere, build and print the report."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import click

from toolkit.cluster.plan import ClusterPlan
from toolkit.errors import RtkError
from toolkit.inventory import Inventory
from toolkit.rundir import RunDir
from toolkit.telemetry.fetch import fetch_run
from toolkit.transport import make_transport

Fetch = Callable[[Path], list[str]]


def report_if_here(run_dir: str, fetch: Fetch | None = None) -> Path | None:
    """Build and print the report of ``run_dir``; returns where report.html is.

    When this machine does not see the run's telemetry (no shared filesystem with the
    head), ``fetch`` copies the results into the same path here, or into ./RUN_ID when
    that path cannot be written. Problems are printed, never raised: the run itself
    is over and its outcome decides rtk's exit status.
    """
    path = Path(os.path.expanduser(run_dir))
    if not RunDir(path).has_telemetry:
        if fetch is None:
            click.echo(f"rtk: no telemetry under {path} on this machine", err=True)
            return None
        fetched = _fetch_here(path, fetch)
        if fetched is None:
            return None
        path = fetched
    from toolkit.telemetry.report import build_report, format_summary, write_report

    try:
        report = build_report(path)
        files = write_report(report)
    except RtkError as e:
        click.echo(f"rtk: report: {e}", err=True)
        return None
    click.echo(format_summary(report))
    click.echo(f"report: {files.html}")
    return Path(files.html)


def _fetch_here(path: Path, fetch: Fetch) -> Path | None:
    for dest in (path, Path.cwd() / path.name):
        try:
            dest.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        try:
            files = fetch(dest)
        except RtkError as e:
            click.echo(f"rtk: could not bring the run's results here: {e}", err=True)
            return None
        click.echo(f"rtk: copied {len(files)} result file(s) from the head into {dest}", err=True)
        return dest
    click.echo(f"rtk: cannot write {path} or ./{path.name} here for the results", err=True)
    return None


def from_head(inventory: Inventory, plan: ClusterPlan, run_dir: str) -> Fetch:
    """A ``Fetch`` that copies ``run_dir``'s results from the cluster's head."""

    def fetch(dest: Path) -> list[str]:
        with make_transport(inventory) as transport:
            return fetch_run(plan, transport, run_dir, dest)

    return fetch
