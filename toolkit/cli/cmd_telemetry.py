"""``rtk telemetry record``: sample every node while any command runs."""

from __future__ import annotations

from typing import Any

import click

from toolkit.cli.options.decorators import (
    dry_run_option,
    inventory_and_command,
    local_option,
    output_options,
    slurm_option,
    telemetry_from,
    telemetry_options,
)
from toolkit.cli.options.power_options import power_options, power_settings
from toolkit.cli.options.stall_options import stall_options, stall_settings
from toolkit.cli.output.run_report import record_and_report
from toolkit.flows import (
    CommandWorkload,
)
from toolkit.flows.recorded import default_run_id

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
@click.argument("inventory", required=False, type=click.Path(dir_okay=False))
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--working-dir", default=".", show_default=True, type=click.Path(file_okay=False))
@stall_options
@power_options
@output_options
@telemetry_options
@slurm_option
@local_option
@dry_run_option
def record_cmd(
    inventory: str | None,
    command: tuple[str, ...],
    working_dir: str,
    on_stall: str,
    stall_timeout_s: float | None,
    stall_floor_s: float,
    power_policy: str,
    max_slowdown: float,
    eta: float | None,
    output_dir: str,
    run_id: str | None,
    slurm: bool,
    local: bool,
    dry_run: bool,
    **options: Any,
) -> None:
    """Record telemetry around a command (help: RECORD_HELP)."""
    inv, command = inventory_and_command(inventory, command, local, slurm)
    telemetry = telemetry_from(**options)
    run_dir = f"{output_dir.rstrip('/')}/{run_id or default_run_id(inv)}"
    stall = stall_settings(on_stall, stall_timeout_s, stall_floor_s)
    power = power_settings(power_policy, max_slowdown, eta)
    workload = CommandWorkload(
        command, working_dir, run_dir=run_dir, telemetry=telemetry, stall=stall, power=power
    )
    record_and_report(inv, workload, dry_run)
