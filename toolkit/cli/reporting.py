"""After a run: build its report when the run directory is on this machine."""

from __future__ import annotations

import os
from pathlib import Path

import click

from toolkit.errors import RtkError


def report_if_here(run_dir: str) -> Path | None:
    """Build and print the report of ``run_dir`` if this machine sees its telemetry.

    Returns where report.html is, or None when the run directory is elsewhere (a
    cluster whose nodes share a filesystem this machine does not mount).
    """
    path = Path(os.path.expanduser(run_dir))
    if not (path / "telemetry" / "manifest.json").exists():
        click.echo(
            f"rtk: no telemetry under {path} on this machine; build the report where the "
            "run directory is: rtk report RUN_DIR",
            err=True,
        )
        return None
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
