"""``rtk demo``: the main job on this machine, no inventory needed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from toolkit.cli.options.decorators import absolute_output_dir, dry_run_option, verbose_option
from toolkit.cli.output.cluster import render_status
from toolkit.cli.output.progress import progress_reporter
from toolkit.cli.output.run_report import render_collect, render_report
from toolkit.cluster.progress_reporter import Reporter
from toolkit.cluster.ray_status import ClusterStatus
from toolkit.errors import RtkError
from toolkit.flows import (
    CollectOutcome,
    PreflightFailedError,
    PreflightOutcome,
    PreflightPolicy,
    ReportOutcome,
    Session,
    TrainWorkload,
)
from toolkit.flows.run import RunEvents, execute
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
    workload = TrainWorkload(config, run_id)
    events = DemoEvents(reporter, max_steps)
    with reporter, Session(default_inventory(), reporter, log=click.echo) as session:
        reporter.expect(len(session.plan.nodes))
        plan = session.run_plan(
            workload,
            PreflightPolicy.ENFORCE,
            bring_up=True,
            status=True,
            smoke=True,
            fetch=False,
            tear_down=not keep,
        )
        if dry_run:
            click.echo(session.up_plan(), nl=False)
            click.echo(plan.render(), nl=False)
            if keep:
                click.echo("then: the cluster stays up (--keep)")
            return
        try:
            done = execute(session, plan, workload, events)
        except PreflightFailedError as e:
            if e.preflight.report is not None:
                click.echo(e.preflight.report.render(), nl=False)
            raise RtkError("preflight failed: see the FAIL lines above") from e
    click.echo(
        f"demo {'finished' if done.ok else 'FAILED'} in {time.monotonic() - began:.1f} s"
        + ("; cluster left running (rtk down --local)" if keep else "")
    )
    if events.html is not None:
        click.echo(f"open the report: {events.html}")
    if not done.ok:
        sys.exit(1)


class DemoEvents(RunEvents):
    """What ``rtk demo`` prints between its steps."""

    def __init__(self, reporter: Reporter, max_steps: int) -> None:
        """Print through ``reporter``; the job trains ``max_steps`` steps."""
        self.reporter = reporter
        self.max_steps = max_steps
        self.html: Path | None = None

    def status(self, status: ClusterStatus) -> None:
        """The nodes Ray sees, as a small table."""
        click.echo(render_status(status))

    def preflight(self, outcome: PreflightOutcome) -> None:
        """Every check."""
        if outcome.report is not None:
            click.echo(outcome.report.render(), nl=False)

    def smoke(self, ran: dict[str, dict[str, str]]) -> None:
        """Where each node's task ran."""
        for name, where in ran.items():
            click.echo(f"  task for {name} ran on host {where['hostname']}")

    def job_starts(self) -> None:
        """What trains now."""
        self.reporter.info(f"training the tiny GPT for {self.max_steps} steps, with telemetry")

    def collected(self, outcome: CollectOutcome) -> None:
        """Where the results are, or why not."""
        render_collect(outcome, fetched=False)

    def reported(self, outcome: ReportOutcome) -> None:
        """The report's summary."""
        self.html = render_report(outcome)
