"""``rtk env``: each node's network and NCCL/Gloo variables, or Ray's client variables."""

from __future__ import annotations

import os

import click

from toolkit.cli.options.decorators import choose_inventory, inventory_options, print_json
from toolkit.cluster.plan import build_plan
from toolkit.credentials.client_env import SHELLS, detect_shell, local_client_env, render_exports
from toolkit.errors import ClusterError
from toolkit.flows import Session
from toolkit.netenv.detect import detect_network
from toolkit.netenv.report_text import render_network
from toolkit.state.store import StateStore

ENV_HELP = """Show each node's network and the NCCL/Gloo variables rtk gives Ray there.

\b
Probes every node of INVENTORY at once and changes nothing: the interface on
the route to the head (its address, MTU, state, speed, bonding) and every
InfiniBand/RoCE port under /sys/class/infiniband (state, link layer, rate,
netdev). Then it resolves network.profile (auto, ib, roce, ethernet) per node
and prints each variable with the reason for its value; network.env in the
inventory overrides any of them. rtk up writes these variables into the env
file that ray start reads, so every Ray worker inherits them.

\b
With --export it probes nothing and prints the variables that point Ray's
own CLI and SDK at the cluster from this machine, for your shell to eval:
RAY_ADDRESS (the head's GCS, for ray status and ray.init on a node),
RAY_API_SERVER_ADDRESS (the dashboard, for ray job ...), RAY_AUTH_MODE and
RAY_AUTH_TOKEN_PATH (the 0600 token file rtk up keeps here; RAY_AUTH_TOKEN,
which would win over it, is unset), under ray.tls RAY_USE_TLS=1 and
RAY_TLS_CA_CERT/SERVER_CERT/SERVER_KEY (the cluster's CA and this machine's
client certificate, kept here by rtk up; without ray.tls they are unset), and
RTK_INVENTORY, so later rtk commands can leave the inventory out. It needs
the cluster brought up from this machine (rtk up).

\b
Examples:
  rtk env inv.yaml
  rtk env --local
  rtk env inv.yaml --json
  eval "$(rtk env inv.yaml --export)"       then: ray status; ray job submit -- ...
  rtk env inv.yaml --export --shell fish | source

Exits 0 when every node was probed and fits the profile, 4 otherwise;
with --export 0, or 6 when this machine has no state for the cluster.
"""
ENV_JSON_HELP = "Print what was detected and chosen, per node, as JSON on stdout."
EXPORT_HELP = "Print the variables for Ray's CLI and SDK as shell code to eval; probe nothing."
SHELL_HELP = "The shell --export writes for (default: $SHELL's, else bash)."


@click.command("env", help=ENV_HELP)
@inventory_options
@click.option("--json", "as_json", is_flag=True, help=ENV_JSON_HELP)
@click.option("--export", "export", is_flag=True, help=EXPORT_HELP)
@click.option("--shell", type=click.Choice(SHELLS), default=None, help=SHELL_HELP)
def env_cmd(
    inventory: str | None,
    local: bool,
    slurm: bool,
    as_json: bool,
    export: bool,
    shell: str | None,
) -> None:
    """Show each node's network environment, or export Ray's (help: ENV_HELP)."""
    if export and as_json:
        raise click.UsageError("--export and --json exclude each other")
    if shell is not None and not export:
        raise click.UsageError("--shell goes with --export")
    inv = choose_inventory(inventory, local, slurm)
    plan = build_plan(inv)
    if export:
        path = None if local else inventory or os.environ.get("RTK_INVENTORY")
        env = local_client_env(plan, StateStore(inv.name), path)
        click.echo(render_exports(env, shell or detect_shell(os.environ.get("SHELL"))), nl=False)
        return
    # Through a session, so a simulated cluster (ctx.obj's transport factory) serves too.
    with Session(inv) as session:
        report = detect_network(session.plan, session.transport)
    if as_json:
        print_json(report.to_json())
    else:
        click.echo(render_network(report), nl=False)
    if report.failed:
        raise ClusterError(
            "no network environment for "
            + "; ".join(
                why if why.startswith(f"{name}:") else f"{name}: {why}"
                for name, why in report.failed.items()
            )
        )
