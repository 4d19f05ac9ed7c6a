"""``rtk env``: each node's network and the NCCL / Gloo variables rtk gives Ray there."""

from __future__ import annotations

import click

from toolkit.cli.common import choose_inventory, inventory_options, print_json
from toolkit.cluster import build_plan
from toolkit.cluster.connect import make_transport
from toolkit.errors import ClusterError
from toolkit.netenv.detect import detect_network
from toolkit.netenv.render import render_network

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
Examples:
  rtk env inv.yaml
  rtk env --local
  rtk env inv.yaml --json

Exits 0 when every node was probed and fits the profile, 4 otherwise.
"""
ENV_JSON_HELP = "Print what was detected and chosen, per node, as JSON on stdout."


@click.command("env", help=ENV_HELP)
@inventory_options
@click.option("--json", "as_json", is_flag=True, help=ENV_JSON_HELP)
def env_cmd(inventory: str | None, local: bool, slurm: bool, as_json: bool) -> None:
    """Show each node's network environment (help: ENV_HELP)."""
    inv = choose_inventory(inventory, local, slurm)
    plan = build_plan(inv)
    with make_transport(inv) as transport:
        report = detect_network(plan, transport)
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
