"""``rtk demo``: the main job on this machine, no inventory needed."""

from __future__ import annotations

import sys
import time

import click

from toolkit.cli.cmd_cluster import render_status
from toolkit.cli.common import absolute_output_dir, dry_run_option, verbose_option
from toolkit.cli.progress import progress_reporter
from toolkit.cli.reporting import report_run
from toolkit.errors import RtkError
from toolkit.flows import PreflightFailedError, PreflightPolicy, Session, TrainWorkload
from toolkit.inventory import default_inventory
from toolkit.train.config import TrainConfig

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
@click.option("--output-dir", default="~/rtk-runs", show_default=True, callback=absolute_output_dir)
@dry_run_option
@verbose_option
def demo_cmd(
    keep: bool, max_steps: int, num_workers: int, output_dir: str, dry_run: bool, verbose: bool
) -> None:
    """The whole flow on one machine (help: DEMO_HELP)."""
    began = time.monotonic()
    # Plain lines, not a live block: the job's log is printed while it reports.
    reporter = progress_reporter(verbose, live=False)
    run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    config = TrainConfig(
        run_dir=f"{output_dir.rstrip('/')}/{run_id}",
        model_size="tiny",
        num_workers=num_workers,
        max_steps=max_steps,
        barrier_every=10,
        save_steps=max_steps,
        log_every=10,
        # The tiny GPT trains in seconds; compiling it (what --compile auto does on
        # GPUs) takes tens of seconds.
        compile="off",
    ).check()
    html = None
    workload = TrainWorkload(config, run_id)
    with reporter, Session(default_inventory(), reporter, log=click.echo) as session:
        reporter.expect(len(session.plan.nodes))
        if dry_run:
            click.echo(session.up_plan(), nl=False)
            click.echo(session.run_plan(workload, PreflightPolicy.ENFORCE).render(), nl=False)
            click.echo("then: " + ("the cluster stays up (--keep)" if keep else "rtk down"))
            return
        try:
            session.bring_up(PreflightPolicy.SKIP)
            click.echo(render_status(session.status()))
            try:
                checked = session.preflight(output_dir, PreflightPolicy.ENFORCE, save=False)
            except PreflightFailedError as e:
                if e.preflight.report is not None:
                    click.echo(e.preflight.report.render(), nl=False)
                raise RtkError("preflight failed: see the FAIL lines above") from e
            if checked.report is not None:
                click.echo(checked.report.render(), nl=False)
            for name, where in session.smoke().items():
                click.echo(f"  task for {name} ran on host {where['hostname']}")
            reporter.info(f"training the tiny GPT for {max_steps} steps, with telemetry")
            outcome = session.run_workload(workload)
            html = report_run(session, config.run_dir, fetch=False)
        finally:
            if not keep:
                session.tear_down()
    click.echo(
        f"demo {'finished' if outcome.ok else 'FAILED'} in {time.monotonic() - began:.1f} s"
        + ("; cluster left running (rtk down --local)" if keep else "")
    )
    if html is not None:
        click.echo(f"open the report: {html}")
    if not outcome.ok:
        sys.exit(1)
