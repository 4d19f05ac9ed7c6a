"""``rtk shell INVENTORY [NODE] [-- COMMAND...]`` (alias ``rtk ssh``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import click

from toolkit.cli.common import DRY_RUN_HELP, choose_inventory, local_option
from toolkit.cluster.plan import build_plan
from toolkit.cluster.plan_summary import cut_hostlist
from toolkit.credentials.client_env import node_session_script
from toolkit.errors import TransportError
from toolkit.inventory import Inventory, Node
from toolkit.shell import join
from toolkit.transport.ssh_command import ssh_argv

# Unknown NODE: up to this many valid names are listed one by one, past it as a hostlist.
MAX_NAMES_LISTED = 8
# Where the words after ``--`` wait for the command (``click.Context.meta``).
COMMAND_KEY = "rtk.shell.command"

SHELL_HELP = """Open a shell on a node of INVENTORY (default the head) in the cluster's environment.

\b
The session loads the env file rtk up wrote on the node (Ray's token file and
RAY_AUTH_MODE, the NCCL/Gloo variables, the inventory's Python first on PATH)
and sets RAY_ADDRESS and RAY_API_SERVER_ADDRESS, so Ray's own tools work as
Ray's docs show them: ray status, ray job submit/list/logs/stop,
ray.init() or ray.init(address="auto") in python or a notebook.
It logs in with the system ssh and the inventory's user, port, key,
known_hosts and jump host; on a node whose Ray runs in a container
(container: in the inventory) the shell runs inside that container.
With -- COMMAND it runs COMMAND there instead
(its words quoted, as rtk exec does; for pipes run bash -c '...') and ends
with its exit status. With --local, or an inventory whose transport is local,
the shell runs on this machine.

\b
Examples:
  rtk shell inv.yaml                  the head, interactive
  rtk shell inv.yaml node7            another node
  rtk shell inv.yaml -- ray status    one command, then exit with its status
  rtk shell inv.yaml --dry-run        print the ssh command line, run nothing
  rtk shell --local                   this machine's one-node cluster
  rtk ssh inv.yaml                    the same as rtk shell

Exits with the shell's or COMMAND's status; ssh's 255 when the node cannot be
reached; 2 for an unknown NODE; 3 for an invalid inventory.
"""


class ShellCommand(click.Command):
    """A command whose words after ``--`` are COMMAND, never its own arguments."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Keep what follows the first ``--`` in ``ctx.meta[COMMAND_KEY]``; parse the rest."""
        if "--" in args:
            at = args.index("--")
            if at == len(args) - 1:
                raise click.UsageError("nothing after --: give the command to run", ctx)
            ctx.meta[COMMAND_KEY] = tuple(args[at + 1 :])
            args = args[:at]
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        """The usage line, with ``[-- COMMAND...]`` last."""
        return [*super().collect_usage_pieces(ctx), "[-- COMMAND...]"]


def pick_node(inv: Inventory, name: str | None) -> Node:
    """The node called ``name``, or the head when None.

    Raises:
        click.UsageError: No node of the inventory has that name (a few valid names
            are listed, as a hostlist past ``MAX_NAMES_LISTED``).
    """
    if name is None:
        return inv.head
    try:
        return inv.node(name)
    except KeyError:
        names = [n.name for n in inv.nodes]
        listed = ", ".join(names) if len(names) <= MAX_NAMES_LISTED else cut_hostlist(names)
        raise click.UsageError(
            f"no node {name!r} in {inv.source}; its {len(names):,} node(s): {listed} "
            f"(the head, {inv.head_name}, when NODE is left out)"
        ) from None


def session_argv(inv: Inventory, node: Node, command: Sequence[str], tty: bool) -> list[str]:
    """The argv that opens the session on ``node``: ssh, or bash here for a local inventory.

    On a node whose Ray runs in a container, the session's bash runs in that container
    (``docker exec``/``podman exec``, with a terminal when ``tty``).

    Raises:
        TransportError: The inventory's transport has no shell session (srun).
    """
    plan = build_plan(inv)
    script = node_session_script(plan, command)
    bash = ["bash", "--norc", "--noprofile", "-c", script]
    container = next((n.container for n in plan.nodes if n.name == node.name), None)
    if container is not None:
        bash = container.exec_argv(bash, tty=tty)
    if inv.transport == "local":
        return bash
    if inv.transport == "ssh":
        return ssh_argv(node, join(bash), tty=tty)
    raise TransportError(
        f"{inv.source}: rtk shell reaches nodes over ssh or on this machine, "
        f"not over {inv.transport}"
    )


@click.command("shell", cls=ShellCommand, help=SHELL_HELP)
@click.argument("inventory", required=False, type=click.Path(dir_okay=False))
@click.argument("node", required=False)
@local_option
@click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)
def shell_cmd(inventory: str | None, node: str | None, local: bool, dry_run: bool) -> None:
    """Open a shell, or run a command, on a node (help: SHELL_HELP)."""
    command: tuple[str, ...] = click.get_current_context().meta.get(COMMAND_KEY, ())
    if inventory is not None and node is None and _names_a_node(inventory, local):
        inventory, node = None, inventory
    inv = choose_inventory(inventory, local)
    target = pick_node(inv, node)
    tty = sys.stdin.isatty() and (not command or sys.stdout.isatty())
    argv = session_argv(inv, target, command, tty)
    if dry_run:
        click.echo(join(argv))
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        raise TransportError(f"{target.name}: cannot run {argv[0]}: {e.strerror or e}") from e


def _names_a_node(word: str, local: bool) -> bool:
    """True when the one word given is NODE: with --local, or RTK_INVENTORY set and no such file."""
    if local:
        return not (word.endswith((".yaml", ".yml")) and os.path.isfile(word))
    return bool(os.environ.get("RTK_INVENTORY")) and not os.path.exists(word)
