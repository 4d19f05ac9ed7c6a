"""``rtk preflight``: prove the nodes are fit before a run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from toolkit.cli.common import choose_inventory, inventory_options, print_json
from toolkit.cluster import build_plan
from toolkit.preflight.runner import run_preflight
from toolkit.transport import make_transport

PREFLIGHT_HELP = """Check every node of INVENTORY before a run; one exit status (1: a check failed).

\b
Per node: the transport reaches it; /dev/shm size; open-files and locked-memory
limits; the host name does not resolve to a loopback address; free disk in the run
directory; pinned Ray ports outside the kernel's ephemeral range; the same Python,
ray, torch and NCCL as the other nodes; its clock against the head's.
Per pair, where Ray is up: every node reaches the Ray ports of every other node.
Each line gives the measured value, what is wanted and, when not passed, a hint.

\b
Examples:
  rtk preflight inv.yaml
  rtk preflight inv.yaml --json --output runs/preflight.json
"""


@click.command("preflight", help=PREFLIGHT_HELP)
@inventory_options
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option(
    "--run-dir",
    default="~",
    show_default=True,
    help="Where runs will write, as a path on the nodes (for the free-disk check).",
)
@click.option(
    "--output", type=click.Path(dir_okay=False), help="Also write the results (JSON) here."
)
def preflight_cmd(
    inventory: str | None, local: bool, as_json: bool, run_dir: str, output: str | None
) -> None:
    """Check the nodes (help: PREFLIGHT_HELP)."""
    inv = choose_inventory(inventory, local)
    plan = build_plan(inv)
    with make_transport(inv) as transport:
        report = run_preflight(plan, transport, run_dir)
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(json.dumps(report.to_json(), indent=2) + "\n")
    if as_json:
        print_json(report.to_json())
    else:
        click.echo(report.render(), nl=False)
    sys.exit(report.exit_code)
