"""``rtk train``: the built-in GPT trainer, as a Ray job (``rtk launch``: ``cmd_jobs.py``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import click

from toolkit.cli.options.decorators import choose_inventory, dry_run_option, inventory_options
from toolkit.cli.options.sections import TrainCommand
from toolkit.cli.options.train_options import train_options
from toolkit.cli.output.cluster import render_up_result
from toolkit.cli.output.jobs import outcome_lines
from toolkit.cli.output.progress import progress_reporter
from toolkit.cli.output.run_report import render_collect, render_report
from toolkit.cluster.containers.docker import check_path_mounted
from toolkit.errors import PreflightError, RtkError
from toolkit.flows import (
    BringUpOutcome,
    CollectOutcome,
    Driver,
    PreflightFailedError,
    PreflightOutcome,
    PreflightPolicy,
    ReportOutcome,
    Session,
    TrainWorkload,
    WorkloadOutcome,
)
from toolkit.flows.ray_address import RayAddress, check_address, find_cluster
from toolkit.flows.run import RunEvents, execute
from toolkit.flows.timings import TrainClock
from toolkit.inventory import Inventory
from toolkit.jobs.client import JobOutcome
from toolkit.stall.settings import RESTART_EXCLUDING
from toolkit.state.store import StateStore
from toolkit.train.config import TrainConfig

TRAIN_HELP = """Train the built-in GPT on the cluster INVENTORY describes, as a Ray job.

\b
The job runs Ray Train's TorchTrainer on the head: one worker per GPU (per node
on CPU clusters) unless --num-workers says otherwise. Logs stream here; rtk ends
with the job's real status, and Ctrl-C stops the job. Before it, the fast
preflight checks run (--no-preflight skips them) and are kept in the run
directory as preflight.json; a failed check stops rtk before training. The
model is built from its size (nothing is downloaded); data is a learnable
synthetic task, or a local text file read as bytes (--data).

\b
The run directory (--output-dir/RUN_ID) is written by the workers: markers
(every step and barrier, per rank), metrics.jsonl, and checkpoints. It must be on
a filesystem every node shares (or a URI Ray Train can write, e.g. s3://...).
With telemetry (the default) one sampler per node records power, GPU and host
readings; at the end they are collected into RUN_DIR/telemetry and the report is
built into RUN_DIR/report (see rtk report --help).

\b
Examples:
  rtk train inv.yaml --model-size tiny --max-steps 30 --barrier-every 5
  rtk train inv.yaml --model-size 350M --strategy fsdp2 --precision bf16
  rtk train inv.yaml --strategy deepspeed --zero-stage 2 --offload-optimizer
  rtk train inv.yaml --resume --max-steps 40        continue the last run
  rtk up --local && rtk train --local --num-workers 2   this machine alone

\b
Options may be spelled with underscores too, as train_gpt.py's are in Ray guides:
  eval "$(rtk env inv.yaml --export)"
  rtk train --model_size 350M --batch_size 2 --gradient_accumulation_steps 4 \\
      --precision bf16 --num_workers 0 --resources_per_worker '{"GPU": 1, "CPU": 4}' \\
      --ray_address auto --save_steps 500
"""


@dataclass(frozen=True)
class TrainAsked:
    """What ``rtk train`` was asked, its inventory aside.

    Attributes:
        trainer: The trainer's options, but for the two read once the cluster is
            known: ``run_dir`` (empty here) and ``resources_per_worker``.
        resources_per_worker: ``--resources-per-worker``'s JSON, as given.
        run_id: ``--run-id``; None: the resumed run's, or a new one.
        output_dir: ``--output-dir``.
        preflight: Whether the fast checks run first.
        address: ``--ray-address``.
        local: ``--local``.
        slurm: ``--slurm``.
        driver: ``--driver``.
        bring_up: ``--up``.
        dry_run: ``--dry-run``.
    """

    trainer: TrainConfig
    resources_per_worker: str | None
    run_id: str | None
    output_dir: str
    preflight: bool
    address: RayAddress
    local: bool
    slurm: bool
    driver: Driver
    bring_up: bool
    dry_run: bool


@click.command("train", cls=TrainCommand, help=TRAIN_HELP)
@inventory_options
@train_options
@dry_run_option
def train_cmd(
    inventory: str | None,
    local: bool,
    slurm: bool,
    resources_per_worker: str | None,
    run_id: str | None,
    output_dir: str,
    preflight: bool,
    ray_address: RayAddress,
    driver: str,
    bring_up: bool,
    show_timings: bool,
    dry_run: bool,
    **trainer: Any,
) -> None:
    """Run the built-in trainer (help: TRAIN_HELP); ``trainer``: ``TrainConfig``'s fields."""
    asked = TrainAsked(
        trainer=TrainConfig.from_json({"run_dir": "", **trainer}),
        resources_per_worker=resources_per_worker,
        run_id=run_id,
        output_dir=output_dir,
        preflight=preflight,
        address=ray_address,
        local=local,
        slurm=slurm,
        driver=Driver(driver),
        bring_up=bring_up,
        dry_run=dry_run,
    )
    clock = TrainClock()
    try:
        _train(inventory, clock, asked)
    finally:
        if show_timings:
            click.echo(clock.timings().render(), nl=False, err=True)


def _train(inventory: str | None, clock: TrainClock, asked: TrainAsked) -> None:
    inv = _cluster(inventory, asked.local, asked.slurm, asked.address)

    def log(line: str) -> None:
        clock.see(line)
        click.echo(line)

    reporter = progress_reporter(False) if asked.bring_up and not asked.dry_run else None
    with contextlib.ExitStack() as stack:
        if reporter is not None:
            stack.enter_context(reporter)
        session = stack.enter_context(Session(inv, reporter, log=log))
        _train_in(session, clock, asked)


def _train_in(session: Session, clock: TrainClock, asked: TrainAsked) -> None:
    inv = session.inventory
    dry_run, driver, bring_up = asked.dry_run, asked.driver, asked.bring_up
    check_address(asked.address, session.plan)
    run_id = (
        asked.run_id
        or _last_run(session.store, asked.trainer.resume)
        or f"{inv.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    output_dir = asked.output_dir.rstrip("/")
    resources = _resources(asked.resources_per_worker)
    policy = PreflightPolicy.ENFORCE if asked.preflight else PreflightPolicy.SKIP
    config = dataclasses.replace(
        asked.trainer,
        run_dir=f"{output_dir}/{run_id}",
        resources_per_worker=resources,
        # restart-excluding goes on without the suspect nodes, down to min_nodes.
        min_nodes=inv.min_nodes if asked.trainer.stall.policy == RESTART_EXCLUDING else 0,
    ).check()
    containers = [n.container for n in session.plan.nodes if n.container is not None]
    check_path_mounted(containers, config.run_dir, "the run directory")
    workload = TrainWorkload(config, run_id)
    # Without telemetry too, the run's records (metrics.jsonl, markers) come here; a
    # job stopped by Ctrl-C (or an sbatch script's teardown) still has them brought.
    plan = session.run_plan(
        workload, policy, config.telemetry, driver, bring_up=bring_up, collect_after_interrupt=True
    )
    if dry_run:
        if bring_up:
            click.echo(session.up_plan(), nl=False)
        click.echo(plan.render(), nl=False)
        return
    try:
        done = execute(session, plan, workload, TrainEvents(session), clock)
    except PreflightFailedError as e:
        if e.preflight.report is not None:
            click.echo(e.preflight.report.render(only_problems=True), nl=False, err=True)
        raise PreflightError(
            f"not training: preflight failed (saved in {e.preflight.saved_to}); "
            "fix it, or --no-preflight to train anyway"
        ) from e
    if not done.ok:
        sys.exit(1)


class TrainEvents(RunEvents):
    """What ``rtk train`` prints between its steps."""

    def __init__(self, session: Session) -> None:
        """Render for ``session``'s cluster."""
        self.session = session

    def up(self, outcome: BringUpOutcome) -> None:
        """The nodes that came up, as ``rtk up`` says it."""
        render_up_result(self.session.inventory, self.session.plan, outcome, as_json=False)

    def preflight(self, outcome: PreflightOutcome) -> None:
        """One line for the checks (and the problems, if any passed with warnings)."""
        report = outcome.report
        assert report is not None  # ENFORCE runs the checks
        if report.status != "pass":
            click.echo(report.render(only_problems=True), nl=False, err=True)
        click.echo(
            f"rtk: preflight {report.status} in {report.duration_s:.1f} s "
            f"({len(report.checks)} checks, {outcome.saved_to})",
            err=True,
        )

    def job(self, outcome: WorkloadOutcome) -> None:
        """How the job ended."""
        _print_outcome(outcome.job, outcome.request.run_dir)

    def collected(self, outcome: CollectOutcome) -> None:
        """Where the results came from."""
        render_collect(outcome)

    def reported(self, outcome: ReportOutcome) -> None:
        """The report's summary and where report.html is."""
        render_report(outcome)


def _print_outcome(outcome: JobOutcome, run_dir: str | None) -> None:
    """How the job ended (as ``rtk launch`` says it), then where its run directory is."""
    for line in outcome_lines(outcome, run_dir):
        click.echo(f"rtk: {line}", err=True)


def _cluster(inventory: str | None, local: bool, slurm: bool, address: RayAddress) -> Inventory:
    """The inventory named (argument, --local, --slurm, $RTK_INVENTORY), else --ray-address's."""
    if inventory or local or slurm or os.environ.get("RTK_INVENTORY"):
        return choose_inventory(inventory, local, slurm)
    found = find_cluster(address, os.environ.get("RAY_ADDRESS"))
    # Nothing named and nothing found for auto: choose_inventory says what to give.
    return found if found is not None else choose_inventory(None, local, slurm)


def _resources(text: str | None) -> dict[str, float]:
    """``--resources-per-worker``'s JSON object of amounts, each finite and not negative.

    Raises:
        click.BadParameter: Not such an object (exit 2, as for any bad option).
    """
    if not text:
        return {}
    try:
        # RecursionError: json's reader gives up on thousands of nested brackets.
        data = json.loads(text)
        resources = {str(k): float(v) for k, v in data.items()}
    except (ValueError, AttributeError, TypeError, RecursionError) as e:
        raise click.BadParameter(
            f'{text!r}: give a JSON object like \'{{"GPU": 1, "CPU": 4}}\'',
            param_hint="--resources-per-worker",
        ) from e
    wrong = {k: v for k, v in resources.items() if not (math.isfinite(v) and v >= 0)}
    if wrong:
        raise click.BadParameter(
            f"{text!r}: amounts are finite numbers >= 0; got {wrong}",
            param_hint="--resources-per-worker",
        )
    return resources


def _last_run(store: StateStore, resume: bool) -> str | None:
    if not resume:
        return None
    state = store.load()
    last = state.last_run if state is not None else None
    if last is None:
        raise RtkError(
            "--resume: no earlier run of this cluster is recorded here; name it with --run-id"
        )
    return last.run_id
