"""``rtk torchrun``: a torchrun script on every node of the cluster, power-profiled."""

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
from toolkit.flows import Session
from toolkit.flows.recorded import default_run_id
from toolkit.jobs.runtime_env import RuntimeEnvError, parse_env_pairs
from toolkit.torchrun.request_checks import check_port, check_request
from toolkit.torchrun.spec import TorchrunSpec
from toolkit.workloads import TorchrunWorkload

TORCHRUN_HELP = """Run a torchrun script on every node of INVENTORY's cluster, then report.

\b
One torchrun per node, as `torchrun --nnodes N --rdzv-backend c10d` would be started
by hand on each: they meet at a c10d rendezvous on the head's pinned port
(ports.rendezvous, default 29400), with the network settings rtk chose for
NCCL/Gloo (rtk env). --nproc-per-node defaults to each node's GPUs (1 on a node
without). The script is found in --working-dir, which is shipped to every node.
Every node's samplers record power meanwhile; the ranks' markers (toolkit.markers,
or --auto-steps for a script nobody edited) and the traces end in one run
directory, and the report is built. Logs stream here; Ctrl-C stops every node's
ranks; rtk exits 1 when a node's torchrun failed (the first failure stops the rest).

\b
--auto-steps counts the steps of a script without rtk in it: every optimizer.step()
ends one, and the time in backward (where DDP's all-reduce waits) shows who was
last. --env KEY=VALUE reaches every rank on every node.

\b
A hang is named while it lasts: when no rank finishes a step for the stall timeout
(learned from the run's steps, or --stall-timeout-s), every rank's stack is read and
the log says which rank on which node holds the others up, and where
(stall.json keeps every stack); --on-stall abort also stops the run.

\b
Examples:
  rtk torchrun inv.yaml --auto-steps -- train_ddp.py --epochs 1
  rtk torchrun inv.yaml --nproc-per-node 4 --env NCCL_DEBUG=INFO -- train.py
  rtk torchrun inv.yaml -- -m mypkg.train --lr 1e-4          a module, as torchrun -m
  rtk torchrun inv.yaml --dry-run -- train.py                each node's command line
"""


@click.command("torchrun", help=TORCHRUN_HELP, context_settings={"ignore_unknown_options": True})
@click.argument("inventory", required=False, type=click.Path(dir_okay=False))
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--nproc-per-node",
    type=click.IntRange(min=1),
    default=None,
    help="Ranks per node.  [default: the node's GPUs, 1 without]",
)
@click.option(
    "--auto-steps",
    is_flag=True,
    help="Count steps by optimizer hooks, for a script without toolkit.markers calls.",
)
@click.option(
    "--env",
    "env_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a variable for every rank on every node (repeatable).",
)
@click.option("--working-dir", default=".", show_default=True, type=click.Path(file_okay=False))
@click.option(
    "--rdzv-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="The head's rendezvous port.  [default: the inventory's ports.rendezvous]",
)
@click.option(
    "--max-restarts",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="torchrun's --max-restarts: restarts of every node's ranks after a failure.",
)
@stall_options
@power_options
@output_options
@telemetry_options
@slurm_option
@local_option
@dry_run_option
def torchrun_cmd(
    inventory: str | None,
    command: tuple[str, ...],
    nproc_per_node: int | None,
    auto_steps: bool,
    env_pairs: tuple[str, ...],
    working_dir: str,
    rdzv_port: int | None,
    max_restarts: int,
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
    """Run torchrun on every node (help: TORCHRUN_HELP)."""
    inv, command = inventory_and_command(inventory, command, local, slurm)
    module = command[0] in ("-m", "--module")
    if module:
        command = command[1:]
        if not command:
            raise click.UsageError("-m needs a module: rtk torchrun INVENTORY -- -m MODULE")
    try:
        env = parse_env_pairs(env_pairs)
    except RuntimeEnvError as e:
        raise click.UsageError(str(e)) from e
    telemetry = telemetry_from(**options)
    run_id = run_id or default_run_id(inv)
    spec = TorchrunSpec(
        script=command[0],
        args=tuple(command[1:]),
        nproc_per_node=nproc_per_node,
        auto_steps=auto_steps,
        env=env,
        rdzv_port=rdzv_port or inv.ports.rendezvous,
        run_id=run_id,
        max_restarts=max_restarts,
        module=module,
        stall=stall_settings(on_stall, stall_timeout_s, stall_floor_s),
        power=power_settings(power_policy, max_slowdown, eta),
    )
    run_dir = f"{output_dir.rstrip('/')}/{run_id}"

    def check(session: Session, dry_run: bool) -> None:
        check_request(spec, session.plan, working_dir)
        if not dry_run:
            check_port(spec, session.plan, session.transport)

    record_and_report(inv, TorchrunWorkload(spec, run_dir, working_dir, telemetry), dry_run, check)
