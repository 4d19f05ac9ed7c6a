"""``rtk train``: the built-in GPT trainer, as a Ray job (``rtk launch``: ``cmd_jobs.py``)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from typing import Any

import click

from toolkit.cli.cmd_cluster import render_up_result
from toolkit.cli.common import (
    choose_inventory,
    dry_run_option,
    inventory_options,
    output_options,
    telemetry_options,
)
from toolkit.cli.help import TrainCommand
from toolkit.cli.jobs_output import outcome_lines
from toolkit.cli.progress import progress_reporter
from toolkit.cli.reporting import report_run
from toolkit.cluster.containers.docker import check_path_mounted
from toolkit.errors import PreflightError, RtkError
from toolkit.flows import (
    Driver,
    PreflightFailedError,
    PreflightPolicy,
    Session,
    TrainWorkload,
)
from toolkit.flows.ray_address import (
    RayAddress,
    check_address,
    find_cluster,
    parse_ray_address,
)
from toolkit.flows.timings import TrainClock
from toolkit.inventory import Inventory
from toolkit.jobs.client import JobOutcome
from toolkit.state.store import StateStore
from toolkit.train.config import (
    AUTO_COMPILE_MIN_STEPS,
    COMPILE_BACKENDS,
    COMPILE_MODES,
    PRECISIONS,
    PRESETS,
    STRATEGIES,
    TrainConfig,
)

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


@click.command("train", cls=TrainCommand, help=TRAIN_HELP)
@inventory_options
@click.option(
    "--model-size",
    type=click.Choice(list(PRESETS)),
    default="tiny",
    show_default=True,
    help="GPT preset: tiny (2 x 64, for tests), 125M, 350M, 1.3B or 8B parameters; "
    "built from its shape, nothing is downloaded.",
)
@click.option("--layers", type=int, help="Transformer blocks (default: the preset's).")
@click.option("--width", type=int, help="Hidden size (default: the preset's).")
@click.option(
    "--heads", type=int, help="Attention heads; must divide --width (default: the preset's)."
)
@click.option(
    "--seq-len", type=int, help="Context length in tokens per sequence (default: the preset's)."
)
@click.option(
    "--batch-size",
    type=int,
    default=8,
    show_default=True,
    help="Sequences per worker per micro-step; the global batch is this x "
    "--gradient-accumulation-steps x the workers.",
)
@click.option(
    "--gradient-accumulation-steps",
    type=int,
    default=1,
    show_default=True,
    help="Micro-steps whose gradients are summed before each optimizer step.",
)
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default="fp32",
    show_default=True,
    help="Compute precision: fp32, or bf16/fp16 autocast (fp16 with loss scaling on GPUs).",
)
@click.option(
    "--learning-rate",
    type=float,
    default=3e-3,
    show_default=True,
    help="AdamW's learning rate, reached after the warmup and then constant.",
)
@click.option(
    "--warmup-steps",
    type=int,
    default=0,
    show_default=True,
    help="Optimizer steps of linear warmup from 0 to --learning-rate; 0: none.",
)
@click.option(
    "--max-steps",
    type=int,
    default=100,
    show_default=True,
    help="Optimizer steps to train; with --resume, the step the whole run ends at.",
)
@click.option(
    "--num-workers",
    type=int,
    default=0,
    show_default=True,
    help="Training processes (ranks); 0: one per GPU in the cluster, or one per node on "
    "CPU clusters.",
)
@click.option(
    "--resources-per-worker",
    default=None,
    help='Ray resources of each worker as JSON, e.g. \'{"GPU": 1, "CPU": 4}\' '
    "(default: 1 GPU on GPU clusters, else 1 CPU).",
)
@click.option(
    "--strategy",
    type=click.Choice(STRATEGIES),
    default="ddp",
    show_default=True,
    help="ddp (replicas, overlapped gradient all-reduce), fsdp2 (sharded with fully_shard) "
    "or deepspeed (ZeRO, see --zero-stage).",
)
@click.option(
    "--zero-stage",
    type=int,
    default=2,
    show_default=True,
    help="DeepSpeed ZeRO stage: 0 none, 1 shards optimizer state, 2 also gradients, "
    "3 also weights.",
)
@click.option(
    "--offload-optimizer",
    is_flag=True,
    help="DeepSpeed: keep the optimizer state in CPU memory (less GPU memory, slower).",
)
@click.option(
    "--gradient-checkpointing",
    is_flag=True,
    help="Recompute activations in the backward pass: less memory, more compute.",
)
@click.option(
    "--compile",
    type=click.Choice(COMPILE_MODES),
    default="auto",
    show_default=True,
    help="torch.compile the model: on, off, or auto: on when training on GPUs for at "
    f"least {AUTO_COMPILE_MIN_STEPS} steps. The steps that compile are timed apart "
    "(compile_s in metrics.jsonl) and left out of the run's tokens/s and MFU.",
)
@click.option(
    "--compile-backend",
    type=click.Choice(COMPILE_BACKENDS),
    default="inductor",
    show_default=True,
    hidden=True,
    help="torch.compile's backend: inductor generates kernels; aot_eager and eager only "
    "trace, to tell a tracing problem from a code-generation one.",
)
@click.option(
    "--bucket-cap-mb",
    type=float,
    default=25.0,
    show_default=True,
    help="DDP: gradient bucket size in MB; larger buckets, fewer all-reduce calls.",
)
@click.option(
    "--save-steps",
    type=int,
    default=0,
    show_default=True,
    help="Checkpoint every N optimizer steps (and at the last); 0: never.",
)
@click.option(
    "--keep-checkpoints",
    type=int,
    default=3,
    show_default=True,
    help="Checkpoints kept in the run directory; older ones are deleted.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the run --run-id names, or this cluster's last run, from its last "
    "checkpoint at exactly the next step.",
)
@click.option(
    "--checkpoint-on-stop",
    is_flag=True,
    help="When stopped (Ctrl-C, rtk stop, an sbatch job's teardown at its time limit), "
    "finish the step, save a checkpoint and end, so --resume continues there; on "
    "anyway with --save-steps.",
)
@click.option(
    "--barrier-every",
    type=int,
    default=0,
    show_default=True,
    help="Every rank meets at a barrier every N optimizer steps, marked in the run "
    "directory so power traces line up across nodes; 0: no barriers.",
)
@click.option(
    "--straggle",
    default="",
    hidden=True,
    metavar="RANK:SECONDS",
    help="Testing aid: rank RANK sleeps SECONDS before every barrier, so the report's "
    "straggler analysis can be seen to name it.",
)
@click.option(
    "--max-failures",
    type=int,
    default=0,
    show_default=True,
    help="Restarts from the last checkpoint after a worker is lost; 0: the first loss "
    "ends the run.",
)
@click.option(
    "--restart-wait-s",
    type=float,
    default=600.0,
    show_default=True,
    help="After a failure, the seconds a restart waits for the workers' resources "
    "(a lost node coming back) before it counts as failed too.",
)
@output_options
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the weights' initialisation and the data order.",
)
@click.option(
    "--data",
    default=None,
    help="A text file on the nodes, read as bytes (tokens 0-255); default: a learnable "
    "synthetic task, nothing to download.",
)
@click.option(
    "--log-every",
    type=int,
    default=1,
    show_default=True,
    help="Print a step's loss, tokens/s and step time every N steps (metrics.jsonl keeps "
    "every step).",
)
@click.option(
    "--telemetry/--no-telemetry",
    default=True,
    show_default=True,
    help="Sample power, GPUs and hosts on every node during the run, then report.",
)
@click.option(
    "--baseline-s",
    type=float,
    default=0.0,
    show_default=True,
    help="Before training, record the cluster's idle power for this many seconds "
    "(idle.json); 0: none.",
)
@click.option(
    "--cooldown-max-s",
    type=float,
    default=0.0,
    show_default=True,
    help="After training, sample until power is back near the baseline and the "
    "temperature stops moving, at most this many seconds (idle.json); 0: none.",
)
@click.option(
    "--preflight/--no-preflight",
    default=True,
    show_default=True,
    help="Run the fast preflight checks first (saved as preflight.json in the run "
    "directory); a failed check stops before training.",
)
@telemetry_options
@click.option(
    "--ray-address",
    default="auto",
    show_default=True,
    callback=lambda ctx, param, value: _ray_address(value),
    help="Which cluster, as Ray names it: auto (the inventory's; without one, "
    "$RAY_ADDRESS's or the --local cluster's), HOST:PORT (a head's GCS), ray://HOST:PORT "
    "(its Ray Client port) or http://HOST:PORT (its dashboard), for a cluster rtk "
    "brought up. The job's driver runs on the head either way.",
)
@click.option(
    "--driver",
    type=click.Choice([d.value for d in Driver]),
    default=Driver.AUTO.value,
    show_default=True,
    help="Where the job's driver starts: job: through Ray's Jobs API (rtk jobs, logs "
    "and stop reach it); local: as a process of this command, which must run on the "
    "head, as Ray's SLURM template starts its program (no job supervisor to start "
    "first: the first step comes seconds sooner; rtk logs and stop do not reach it); "
    "auto: local inside a SLURM allocation on the head (an rtk sbatch job), else job.",
)
@click.option(
    "--up",
    "bring_up",
    is_flag=True,
    help="Bring the cluster up first, in this same command, as rtk up --no-preflight "
    "would (it stays up: rtk down after). With a local driver (--driver), the driver "
    "starts as soon as the head has its files and imports torch and Ray while the "
    "nodes join, so training starts seconds sooner; rtk's sbatch train template "
    "uses it.",
)
@click.option(
    "--timings",
    "show_timings",
    is_flag=True,
    help="Print where the seconds went at the end: preflight, job start, to the first "
    "step, training, report (as seen from here, to about a second).",
)
@dry_run_option
def train_cmd(inventory: str | None, **options: Any) -> None:
    """Run the built-in trainer (help: TRAIN_HELP)."""
    clock = TrainClock()
    show_timings = options.pop("show_timings")
    try:
        _train(inventory, clock, options)
    finally:
        if show_timings:
            click.echo(clock.timings().render(), nl=False, err=True)


def _train(inventory: str | None, clock: TrainClock, options: dict[str, Any]) -> None:
    address: RayAddress = options.pop("ray_address")
    inv = _cluster(inventory, options.pop("local"), options.pop("slurm"), address)
    dry_run = options.pop("dry_run")
    driver = Driver(options.pop("driver"))
    bring_up = options.pop("bring_up")

    def log(line: str) -> None:
        clock.see(line)
        click.echo(line)

    reporter = progress_reporter(False) if bring_up and not dry_run else None
    with contextlib.ExitStack() as stack:
        if reporter is not None:
            stack.enter_context(reporter)
        session = stack.enter_context(Session(inv, reporter, log=log))
        _train_in(session, address, clock, options, dry_run, driver, bring_up)


def _train_in(
    session: Session,
    address: RayAddress,
    clock: TrainClock,
    options: dict[str, Any],
    dry_run: bool,
    driver: Driver,
    bring_up: bool,
) -> None:
    inv = session.inventory
    check_address(address, session.plan)
    run_id = (
        options.pop("run_id")
        or _last_run(session.store, options["resume"])
        or f"{inv.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    output_dir = options.pop("output_dir").rstrip("/")
    options["resources_per_worker"] = _resources(options["resources_per_worker"])
    policy = PreflightPolicy.ENFORCE if options.pop("preflight") else PreflightPolicy.SKIP
    config = TrainConfig(run_dir=f"{output_dir}/{run_id}", **options).check()
    containers = [n.container for n in session.plan.nodes if n.container is not None]
    check_path_mounted(containers, config.run_dir, "the run directory")
    workload = TrainWorkload(config, run_id)
    if dry_run:
        if bring_up:
            click.echo(session.up_plan(), nl=False)
        plan = session.run_plan(workload, policy, config.telemetry, driver, ahead=bring_up)
        click.echo(plan.render(), nl=False)
        return
    ahead = session.driver_ahead(workload, driver) if bring_up else None
    try:
        if bring_up:
            with clock.phase("up"):
                brought = session.bring_up(
                    PreflightPolicy.SKIP, head_ready=ahead.start if ahead else None
                )
            render_up_result(inv, session.plan, brought, as_json=False)
        if policy is not PreflightPolicy.SKIP:
            with clock.phase("preflight"):
                _preflight(session, config.run_dir)
    except BaseException:
        if ahead is not None:
            ahead.cancel()
        raise
    try:
        with clock.phase("job"):
            outcome = session.run_workload(workload, driver, ahead)
    except KeyboardInterrupt:
        # The job was stopped (Ctrl-C, or SIGINT from an sbatch script's teardown)
        # and its results gathered on the head: bring them here (with telemetry,
        # report what was recorded), then exit 130.
        with clock.phase("report"):
            report_run(session, config.run_dir, report=config.telemetry)
        raise
    _print_outcome(outcome.job, config.run_dir)
    # Without telemetry too: the run's records (metrics.jsonl, markers) come here.
    with clock.phase("report"):
        report_run(session, config.run_dir, report=config.telemetry)
    if not outcome.ok:
        sys.exit(1)


def _preflight(session: Session, run_dir: str) -> None:
    """The fast checks, saved in the run directory; raises when one failed."""
    try:
        checked = session.preflight(run_dir, PreflightPolicy.ENFORCE)
    except PreflightFailedError as e:
        if e.preflight.report is not None:
            click.echo(e.preflight.report.render(only_problems=True), nl=False, err=True)
        raise PreflightError(
            f"not training: preflight failed (saved in {e.preflight.saved_to}); "
            "fix it, or --no-preflight to train anyway"
        ) from e
    report = checked.report
    assert report is not None  # ENFORCE runs the checks
    if report.status != "pass":
        click.echo(report.render(only_problems=True), nl=False, err=True)
    click.echo(
        f"rtk: preflight {report.status} in {report.duration_s:.1f} s "
        f"({len(report.checks)} checks, {checked.saved_to})",
        err=True,
    )


def _print_outcome(outcome: JobOutcome, run_dir: str | None) -> None:
    """How the job ended (as ``rtk launch`` says it), then where its run directory is."""
    for line in outcome_lines(outcome, run_dir):
        click.echo(f"rtk: {line}", err=True)


def _ray_address(text: str) -> RayAddress:
    try:
        return parse_ray_address(text)
    except RtkError as e:
        raise click.BadParameter(str(e).removeprefix("--ray-address ")) from e


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
