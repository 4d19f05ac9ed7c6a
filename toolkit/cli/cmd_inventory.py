"""``rtk inventory check`` and ``rtk inventory schema``."""

from __future__ import annotations

import dataclasses
import json

import click

from toolkit.cli.options.decorators import print_json
from toolkit.inventory import InventorySpec, load_inventory


@click.group("inventory")
def inventory_group() -> None:
    """Validate inventory files and print their schema."""


@inventory_group.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the resolved nodes as JSON.")
def check_cmd(file: str, as_json: bool) -> None:
    """Validate FILE; print one line per problem (file:line: key: what is wrong).

    Exits 0 when valid, 3 when not. On success, prints the nodes with every
    inherited setting and host range resolved.
    """
    inv = load_inventory(file)
    if as_json:
        print_json(
            {
                "cluster": inv.name,
                "transport": inv.transport,
                "head": inv.head_name,
                "min_nodes": inv.min_nodes,
                "nodes": [
                    {
                        "name": n.name,
                        "address": n.address,
                        "gpus": n.gpus,
                        "cpus": n.cpus,
                        "resources": dict(n.resources),
                        "python": n.python,
                        "user": n.ssh.user,
                        "port": n.ssh.port,
                        "container": dataclasses.asdict(n.container) if n.container else None,
                    }
                    for n in inv.nodes
                ],
            }
        )
        return
    click.echo(
        f"{file}: ok: cluster {inv.name}, {len(inv.nodes)} node(s), head {inv.head_name}, "
        f"transport {inv.transport}, min_nodes {inv.min_nodes}"
    )
    for n in inv.nodes:
        via = f"{n.ssh.user}@{n.address}:{n.ssh.port}" if inv.transport == "ssh" else n.address
        jump = f" via {n.ssh.jump_host}" if n.ssh.jump_host else ""
        runs = f"  {n.container.runtime} {n.container.image}" if n.container else ""
        click.echo(f"  {n.name:<16} {via}{jump}  gpus={n.gpus}{runs}")


@inventory_group.command("schema")
def schema_cmd() -> None:
    """Print the inventory's JSON schema (for editors' YAML validation)."""
    schema = InventorySpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "rtk inventory"
    click.echo(json.dumps(schema, indent=2))
