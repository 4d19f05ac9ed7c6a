"""``rtk telemetry record``: sample every node while any command runs."""

from __future__ import annotations

import sys
import time

import click

from toolkit.cli.common import (
    choose_inventory,
    output_options,
    slurm_option,
    telemetry_options,
)
from toolkit.cli.reporting import from_head, report_if_here
from toolkit.cluster import StateStore, build_plan
from toolkit.telemetry.submit import submit_record

TELEMETRY_HELP = "Power and GPU telemetry for any workload."

RECORD_HELP = """Sample every node of INVENTORY's cluster while COMMAND runs, then report.

\b
COMMAND runs as a Ray job on the head (so a Ray program reaches the whole cluster),
inside --working-dir, which is shipped with it. Meanwhile one sampler per node
records power, GPU and host readings; when the command ends, each node's trace is
collected into the run directory and the report is built. rtk exits with the
command's status.

\b
Examples:
  rtk telemetry record inv.yaml -- python my_train.py --epochs 1
  rtk telemetry record inv.yaml --telemetry-rate-hz 20 --power-rate-hz 50 -- ./bench.sh
"""


@click.group("telemetry", help=TELEMETRY_HELP)
def telemetry_group() -> None:
    """The telemetry commands (help: TELEMETRY_HELP)."""


@telemetry_group.command(
    "record", help=RECORD_HELP, context_settings={"ignore_unknown_options": True}
)
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--working-dir", default=".", show_default=True, type=click.Path(file_okay=False))
@output_options
@telemetry_options
@slurm_option
def record_cmd(
    inventory: str,
    command: tuple[str, ...],
    working_dir: str,
    output_dir: str,
    run_id: str | None,
    telemetry_sensors: str,
    telemetry_rate_hz: float,
    power_rate_hz: float,
    prometheus_port: int,
    slurm: bool,
) -> None:
    """Record telemetry around a command (help: RECORD_HELP)."""
    inv = choose_inventory(inventory, local=False, slurm=slurm)
    plan = build_plan(inv)
    store = StateStore(inv.name)
    run_id = run_id or f"{inv.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = f"{output_dir.rstrip('/')}/{run_id}"
    options = {
        "run_dir": run_dir,
        "sensors": telemetry_sensors,
        "rate_hz": telemetry_rate_hz,
        "power_rate_hz": power_rate_hz,
        "prometheus_port": prometheus_port,
    }
    outcome = submit_record(plan, store, list(command), options, working_dir, click.echo)
    click.echo(
        f"rtk: job {outcome.job_id} {outcome.status} after {outcome.duration_s:.1f} s; "
        f"run dir {run_dir}",
        err=True,
    )
    report_if_here(run_dir, from_head(inv, plan, run_dir))
    if not outcome.ok:
        sys.exit(1)
