"""``rtk sandbox up``, ``rtk sandbox down``, ``rtk sandbox status``."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

import click

from toolkit.cli.options.decorators import print_json, verbose_option
from toolkit.cli.output.progress import ProgressReporter, progress_reporter
from toolkit.errors import SandboxError
from toolkit.sandbox import SlurmStatus, create, destroy, sandbox_status
from toolkit.sandbox.config_files import describe_up
from toolkit.sandbox.names import MAX_NODES, Layout

NAME_HELP = "Sandbox name: 1-8 characters a-z 0-9 _ -."


# Help texts are constants rather than docstrings so that click sees its no-rewrap
# marker, the backspace character before a block of example lines.
GROUP_HELP = """A real multi-node test cluster on this one Linux machine (needs root).

Each node is a set of Linux namespaces: its own network (an address on a host
bridge), PID table, mounts (private /tmp, /dev/shm, /run) and host name, running a
real sshd that accepts root with a generated key. rtk reaches the nodes over SSH
exactly as it reaches real machines, so you can try rtk, and its tests can run,
without any hardware.

\b
  rtk sandbox up --nodes 3     create node1..node3, print the inventory path
  rtk up /tmp/rtk-sb-sandbox/inventory.yaml
  rtk sandbox status           are the nodes and their sshd up?
  rtk sandbox down             remove everything it created

With --slurm the nodes also form a real SLURM cluster (slurmctld on this host,
slurmd in each node, one default partition):

\b
  rtk sandbox up --nodes 3 --slurm
  export SLURM_CONF=/tmp/rtk-sb-sandbox/slurm/etc/slurm.conf
  sinfo; srun -N3 hostname; sbatch -N3 job.sh
"""

UP_HELP = """Create a sandbox of NODES nodes and wait until each accepts an SSH login.

Needs root and Linux, with iproute2, util-linux, openssh-server and tini
installed (scripts/system-packages.sh installs them). It creates, all named
after the sandbox:

\b
  /tmp/rtk-sb-NAME/   keys, known_hosts, sshd configs, logs, inventory.yaml
  rtkb-NAME           a bridge holding <subnet>.1/24
  rtk-NAME-<i>        one network namespace per node, with a veth pair
                      (rtv-NAME-<i>) into the bridge

With --slurm (needs Debian's slurm-wlm and munge) it also starts munged and
slurmctld on this host (files in /tmp/rtk-sb-NAME/munge and .../slurm) and a
slurmd in each node, and waits until sinfo shows every node idle. Jobs run as
root; there is no accounting (no sacct). SLURM's commands find it with

\b
  export SLURM_CONF=/tmp/rtk-sb-NAME/slurm/etc/slurm.conf

and inside the nodes /etc/slurm is that config, so they need nothing there.

While any sandbox exists, net.bridge.bridge-nf-call-iptables is 0, so that the
host's firewall does not drop traffic between nodes. If creating fails, whatever
was created is removed again.

Prints the inventory's path on stdout (progress goes to stderr):

\b
  inv=$(rtk sandbox up --nodes 3) && rtk up "$inv"
  rtk sandbox down                  when done (--name NAME for another name)
"""

DOWN_HELP = """Remove sandbox NAME: node processes, SLURM daemons, netns, veths, bridge and
directory.

Works from the sandbox's record and, when that is missing or partial (say, after
a crashed up), from the names alone. Safe to run twice. Needs root.
"""

STATUS_HELP = """Show whether each node of sandbox NAME runs and its sshd listens, and,
with SLURM, whether munged and slurmctld run and each node's state in sinfo.

Exits 0 when every node is healthy, 1 otherwise; 7 when there is no such sandbox.
"""


def _echo_slurm(slurm: SlurmStatus) -> None:
    state = "up" if slurm.healthy else "NOT healthy"
    daemons = ", ".join(
        f"{name} {f'PID {pid}' if pid else 'NOT running'}"
        for name, pid in (("slurmctld", slurm.slurmctld_pid), ("munged", slurm.munged_pid))
    )
    click.echo(f"slurm: {state} ({daemons})")
    for node, node_state in slurm.nodes.items():
        click.echo(f"  {node:<8} {node_state}")
    if slurm.error:
        click.echo(f"  sinfo: {slurm.error}")


@click.group("sandbox", help=GROUP_HELP)
def sandbox_group() -> None:
    """Sandbox commands."""


@sandbox_group.command("up", help=UP_HELP)
@click.option(
    "--nodes",
    "-n",
    type=click.IntRange(1, MAX_NODES),
    required=True,
    help=f"How many nodes (1-{MAX_NODES}); node i is node<i> at <subnet>.<10+i>.",
)
@click.option("--name", default="sandbox", show_default=True, help=NAME_HELP)
@click.option(
    "--subnet",
    default="10.77.0",
    show_default=True,
    help="First three octets of a private /24 not used on this machine; the host is .1.",
)
@click.option(
    "--slurm",
    is_flag=True,
    help="Also run SLURM: slurmctld and munged on this host, slurmd in each node.",
)
@click.option("--dry-run", is_flag=True, help="Print what would be created; create nothing.")
@verbose_option
def up_cmd(nodes: int, name: str, subnet: str, slurm: bool, dry_run: bool, verbose: bool) -> None:
    """Create a sandbox."""
    if dry_run:
        click.echo(describe_up(Layout.build(name, subnet, nodes), slurm), nl=False)
        return
    with progress_reporter(verbose, nodes) as reporter:
        sandbox = create(
            nodes, name=name, subnet=subnet, slurm=slurm, progress=sandbox_progress(reporter)
        )
        reporter.info(f"sandbox {sandbox.name} is up: {len(sandbox.nodes)} node(s)")
    click.echo(str(sandbox.inventory_path))
    if slurm:
        conf = sandbox.slurm_env()["SLURM_CONF"]
        click.echo(f"SLURM: export SLURM_CONF={conf}   (then sinfo, srun, sbatch)", err=True)
    click.echo(
        f"next: rtk up {sandbox.inventory_path}   (remove it: rtk sandbox down --name {name})",
        err=True,
    )


_NODE_LINE = re.compile(r"^(node\d+): (.*)$", re.DOTALL)


def sandbox_progress(reporter: ProgressReporter) -> Callable[[str], None]:
    """The sandbox's step lines as progress: a node's own steps are node details.

    They show with ``--verbose`` or on a few nodes; the sandbox-wide steps always.
    """

    def say(line: str) -> None:
        match = _NODE_LINE.match(line)
        if match is None:
            reporter.info(line)
        else:
            reporter.node(match.group(1), match.group(2))

    return say


@sandbox_group.command("down", help=DOWN_HELP)
@click.option("--name", default="sandbox", show_default=True, help=NAME_HELP)
@click.option("--dry-run", is_flag=True, help="Print what would be removed; remove nothing.")
def down_cmd(name: str, dry_run: bool) -> None:
    """Remove a sandbox."""
    if dry_run:
        click.echo(_describe_down(name), nl=False)
        return
    removed = destroy(name)
    for line in removed:
        click.echo(f"removed {line}", err=True)
    if removed:
        click.echo(f"sandbox {name} removed")
    else:
        click.echo(f"sandbox {name}: nothing to remove")


def _describe_down(name: str) -> str:
    """What ``rtk sandbox down`` would remove, from the sandbox's record and the system."""
    try:
        status = sandbox_status(name)
    except SandboxError:
        layout = Layout.build(name, "10.77.0", 1)
        return (
            f"plan: rtk sandbox down, sandbox {name!r}: no record here; whatever carries its "
            f"names would go (netns rtk-{name}-*, veths rtv-{name}-*, bridge {layout.bridge}, "
            f"{layout.directory})\n"
        )
    lines = [f"plan: rtk sandbox down, sandbox {status.name!r}"]
    for node in status.nodes:
        lines.append(
            f"  [{node.name}] stop its processes (init PID {node.init_pid or '-'}), "
            f"remove netns {node.netns or '-'} and its veth"
        )
    if status.slurm is not None:
        lines.append("  stop slurmctld and munged")
    lines += [f"  remove leftover {item}" for item in status.leftovers]
    if status.bridge:
        lines.append(f"  remove bridge {status.bridge}")
    lines.append(f"  remove {status.directory}")
    return "\n".join(lines) + "\n"


@sandbox_group.command("status", help=STATUS_HELP)
@click.option("--name", default="sandbox", show_default=True, help=NAME_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON on stdout.")
def status_cmd(name: str, as_json: bool) -> None:
    """Show a sandbox."""
    status = sandbox_status(name)
    if as_json:
        print_json(status.to_json())
    else:
        state = "healthy" if status.healthy else "NOT healthy"
        click.echo(
            f"sandbox {status.name}: {state}, {len(status.nodes)} node(s) in {status.directory}"
        )
        for node in status.nodes:
            running = f"running (init PID {node.init_pid})" if node.running else "NOT running"
            sshd = "sshd listening" if node.sshd_listening else "sshd NOT listening"
            click.echo(
                f"  {node.name:<8} {node.address:<15} {node.netns or '-':<14} {running}, {sshd}"
            )
        if status.slurm is not None:
            _echo_slurm(status.slurm)
        if status.inventory:
            click.echo(f"inventory: {status.inventory}")
        if status.leftovers:
            click.echo(f"leftovers: {', '.join(status.leftovers)} (rtk sandbox down --name {name})")
    if not status.healthy:
        sys.exit(1)
