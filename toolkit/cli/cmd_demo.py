"""``rtk demo``: the main job on this machine, no inventory needed."""

from __future__ import annotations

import time

import click

from toolkit.cli.cmd_cluster import render_status
from toolkit.cli.common import ConsoleReporter
from toolkit.cluster import StateStore, build_plan, cluster_status, down, up
from toolkit.cluster.smoke import run_smoke
from toolkit.inventory import default_inventory
from toolkit.transport import make_transport


@click.command("demo")
@click.option("--keep", is_flag=True, help="Leave the cluster running at the end.")
def demo_cmd(keep: bool) -> None:
    """Run rtk's whole flow on this machine with the embedded one-node inventory.

    Brings up a local Ray cluster (token auth, pinned ports), shows its status,
    runs a Ray task on every node, and takes it down again, also when a step fails.
    """
    began = time.monotonic()
    inv = default_inventory()
    plan = build_plan(inv)
    store = StateStore(inv.name)
    reporter = ConsoleReporter()
    with make_transport(inv) as transport:
        try:
            up(plan, transport, store, reporter)
            click.echo(render_status(cluster_status(plan, transport)))
            ran = run_smoke(plan, transport)
            for name, where in ran.items():
                click.echo(f"  task for {name} ran on host {where['hostname']}")
        finally:
            if not keep:
                down(plan, transport, store, reporter)
    click.echo(
        f"demo finished in {time.monotonic() - began:.1f} s"
        + ("; cluster left running (rtk down --local)" if keep else "")
    )
