"""``rtk demo``: the main job on this machine, no inventory needed."""

from __future__ import annotations

import sys
import time

import click

from toolkit.cli.cmd_cluster import render_status
from toolkit.cli.common import ConsoleReporter
from toolkit.cli.reporting import report_if_here
from toolkit.cluster import StateStore, build_plan, cluster_status, down, up
from toolkit.cluster.connect import make_transport
from toolkit.cluster.smoke import run_smoke
from toolkit.errors import RtkError
from toolkit.inventory import default_inventory
from toolkit.preflight.runner import run_preflight
from toolkit.train.config import TrainConfig
from toolkit.train.submit import submit_train

DEMO_HELP = """Run rtk's whole flow on this machine, with the embedded one-node inventory.

\b
1. brings up a local Ray cluster (token auth, pinned ports) and shows its status,
2. runs the preflight checks (rtk preflight) and a Ray task on every node,
3. trains the tiny GPT on 2 workers with a barrier every 10 steps, while a sampler
   records power and host telemetry,
4. builds the report (terminal summary, summary.json, traces.csv, report.html),
5. takes the cluster down again, also when a step fails.

It needs the trainer's packages: pip install torch==2.13.0 'rtk[train]'.
"""


@click.command("demo", help=DEMO_HELP)
@click.option("--keep", is_flag=True, help="Leave the cluster running at the end.")
@click.option("--max-steps", type=int, default=100, show_default=True)
@click.option("--num-workers", type=int, default=2, show_default=True)
@click.option("--output-dir", default="~/rtk-runs", show_default=True)
def demo_cmd(keep: bool, max_steps: int, num_workers: int, output_dir: str) -> None:
    """The whole flow on one machine (help: DEMO_HELP)."""
    began = time.monotonic()
    inv = default_inventory()
    plan = build_plan(inv)
    store = StateStore(inv.name)
    reporter = ConsoleReporter()
    run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    config = TrainConfig(
        run_dir=f"{output_dir.rstrip('/')}/{run_id}",
        model_size="tiny",
        num_workers=num_workers,
        max_steps=max_steps,
        barrier_every=10,
        save_steps=max_steps,
        log_every=10,
    ).check()
    html = None
    with make_transport(inv) as transport:
        try:
            up(plan, transport, store, reporter)
            click.echo(render_status(cluster_status(plan, transport)))
            preflight = run_preflight(plan, transport, output_dir)
            click.echo(preflight.render(), nl=False)
            if preflight.exit_code:
                raise RtkError("preflight failed: see the FAIL lines above")
            ran = run_smoke(plan, transport)
            for name, where in ran.items():
                click.echo(f"  task for {name} ran on host {where['hostname']}")
            reporter.info(f"training the tiny GPT for {max_steps} steps, with telemetry")
            outcome = submit_train(plan, store, config, run_id, click.echo)
            html = report_if_here(config.run_dir)
        finally:
            if not keep:
                down(plan, transport, store, reporter)
    click.echo(
        f"demo {'finished' if outcome.ok else 'FAILED'} in {time.monotonic() - began:.1f} s"
        + ("; cluster left running (rtk down --local)" if keep else "")
    )
    if html is not None:
        click.echo(f"open the report: {html}")
    if not outcome.ok:
        sys.exit(1)
