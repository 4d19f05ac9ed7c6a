"""``rtk exec INVENTORY -- COMMAND...``."""

from __future__ import annotations

import sys

import click

from toolkit.cli.options.decorators import (
    dry_run_option,
    inventory_and_command,
    local_option,
    print_json,
    slurm_option,
    verbose_option,
)
from toolkit.cli.output.node_runs import render_runs_text
from toolkit.cluster.command import NodeRun, runs_to_json
from toolkit.flows import Session

EXEC_HELP = """Run COMMAND on every node of INVENTORY at once; print output prefixed by node.

\b
On more than 8 nodes, nodes with the same output share one block headed by
their host list (n[0001-1000]), and the exit statuses are counted per status;
--verbose prints every node's lines and status, --json all of it.

\b
The command runs with the cluster's environment (its env file: Ray token,
socket interface, NCCL settings) when the cluster is up. The words after --
are passed as they are, quoted; for pipes, run a shell yourself:
  rtk exec inv.yaml -- nvidia-smi -L
  rtk exec inv.yaml -- bash -c 'ulimit -l; df -h /dev/shm'
  rtk exec --local -- hostname       this machine alone

Exits 0 when the command exited 0 on every node, 1 otherwise.
"""


@click.command("exec", help=EXEC_HELP, context_settings={"ignore_unknown_options": True})
@click.argument("inventory", required=False, type=click.Path(dir_okay=False))
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--no-env", is_flag=True, help="Do not load the cluster's env file first.")
@click.option(
    "--timeout-s", type=float, default=600.0, show_default=True, help="Time limit per node."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print each node's output and status as JSON."
)
@verbose_option
@slurm_option
@local_option
@dry_run_option
def exec_cmd(
    inventory: str | None,
    command: tuple[str, ...],
    no_env: bool,
    timeout_s: float,
    as_json: bool,
    verbose: bool,
    slurm: bool,
    local: bool,
    dry_run: bool,
) -> None:
    """Run COMMAND on every node of INVENTORY at once (help: EXEC_HELP)."""
    inv, command = inventory_and_command(inventory, command, local, slurm)
    with Session(inv) as session:
        if dry_run:
            click.echo(session.exec_request(command, not no_env, timeout_s).render(), nl=False)
            return
        runs = session.exec(command, with_env=not no_env, timeout_s=timeout_s)
    render_runs(runs, as_json, verbose)
    if any(not r.ok for r in runs):
        sys.exit(1)


def render_runs(runs: list[NodeRun], as_json: bool, verbose: bool = False) -> None:
    """JSON, or the output per node (few nodes, ``verbose``) or per distinct output."""
    if as_json:
        print_json(runs_to_json(runs))
        return
    render_runs_text(runs, lambda line, to_err: click.echo(line, err=to_err), verbose)
