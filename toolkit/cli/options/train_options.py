"""``rtk train``'s options, declared once: the trainer's, defaults from ``TrainConfig``.

``train_options`` adds them all, in ``--help``'s order, between the inventory's
(``[INVENTORY]``, ``--local``, ``--slurm``) and ``--dry-run``: the trainer's own
(``TrainConfig``'s fields, each default the dataclass's), the run directory's
(``output_options``), telemetry's, and the command's (preflight, ``--ray-address``,
``--driver``, ``--up``, ``--timings``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from toolkit.cli.options.decorators import output_options, telemetry_options
from toolkit.cli.options.power_options import POWER_OPTIONS
from toolkit.cli.options.stall_options import STALL_OPTIONS
from toolkit.errors import RtkError
from toolkit.flows import Driver
from toolkit.flows.ray_address import RayAddress, parse_ray_address
from toolkit.train.config import (
    AUTO_COMPILE_MIN_STEPS,
    COMPILE_BACKENDS,
    COMPILE_MODES,
    PRECISIONS,
    PRESETS,
    STRATEGIES,
    TrainConfig,
)

F = TypeVar("F", bound=Callable[..., Any])

# The trainer's defaults are TrainConfig's own: declared once, shown by --help.
DEFAULTS = TrainConfig(run_dir="")


def _ray_address(text: str) -> RayAddress:
    try:
        return parse_ray_address(text)
    except RtkError as e:
        raise click.BadParameter(str(e).removeprefix("--ray-address ")) from e


# Top to bottom as --help lists them (each a decorator, applied bottom-up).
_OPTIONS: list[Callable[[Any], Any]] = [
    click.option(
        "--model-size",
        type=click.Choice(list(PRESETS)),
        default=DEFAULTS.model_size,
        show_default=True,
        help="GPT preset: tiny (2 x 64, for tests), 125M, 350M, 1.3B or 8B parameters; "
        "built from its shape, nothing is downloaded.",
    ),
    click.option("--layers", type=int, help="Transformer blocks (default: the preset's)."),
    click.option("--width", type=int, help="Hidden size (default: the preset's)."),
    click.option(
        "--heads", type=int, help="Attention heads; must divide --width (default: the preset's)."
    ),
    click.option(
        "--seq-len", type=int, help="Context length in tokens per sequence (default: the preset's)."
    ),
    click.option(
        "--batch-size",
        type=int,
        default=DEFAULTS.batch_size,
        show_default=True,
        help="Sequences per worker per micro-step; the global batch is this x "
        "--gradient-accumulation-steps x the workers.",
    ),
    click.option(
        "--gradient-accumulation-steps",
        type=int,
        default=DEFAULTS.gradient_accumulation_steps,
        show_default=True,
        help="Micro-steps whose gradients are summed before each optimizer step.",
    ),
    click.option(
        "--precision",
        type=click.Choice(PRECISIONS),
        default=DEFAULTS.precision,
        show_default=True,
        help="Compute precision: fp32, or bf16/fp16 autocast (fp16 with loss scaling on GPUs).",
    ),
    click.option(
        "--learning-rate",
        type=float,
        default=DEFAULTS.learning_rate,
        show_default=True,
        help="AdamW's learning rate, reached after the warmup and then constant.",
    ),
    click.option(
        "--warmup-steps",
        type=int,
        default=DEFAULTS.warmup_steps,
        show_default=True,
        help="Optimizer steps of linear warmup from 0 to --learning-rate; 0: none.",
    ),
    click.option(
        "--max-steps",
        type=int,
        default=DEFAULTS.max_steps,
        show_default=True,
        help="Optimizer steps to train; with --resume, the step the whole run ends at.",
    ),
    click.option(
        "--num-workers",
        type=int,
        default=DEFAULTS.num_workers,
        show_default=True,
        help="Training processes (ranks); 0: one per GPU in the cluster, or one per node on "
        "CPU clusters.",
    ),
    click.option(
        "--resources-per-worker",
        default=None,
        help='Ray resources of each worker as JSON, e.g. \'{"GPU": 1, "CPU": 4}\' '
        "(default: 1 GPU on GPU clusters, else 1 CPU).",
    ),
    click.option(
        "--strategy",
        type=click.Choice(STRATEGIES),
        default=DEFAULTS.strategy,
        show_default=True,
        help="ddp (replicas, overlapped gradient all-reduce), fsdp2 (sharded with fully_shard) "
        "or deepspeed (ZeRO, see --zero-stage).",
    ),
    click.option(
        "--zero-stage",
        type=int,
        default=DEFAULTS.zero_stage,
        show_default=True,
        help="DeepSpeed ZeRO stage: 0 none, 1 shards optimizer state, 2 also gradients, "
        "3 also weights.",
    ),
    click.option(
        "--offload-optimizer",
        is_flag=True,
        help="DeepSpeed: keep the optimizer state in CPU memory (less GPU memory, slower).",
    ),
    click.option(
        "--gradient-checkpointing",
        is_flag=True,
        help="Recompute activations in the backward pass: less memory, more compute.",
    ),
    click.option(
        "--compile",
        type=click.Choice(COMPILE_MODES),
        default=DEFAULTS.compile,
        show_default=True,
        help="torch.compile the model: on, off, or auto: on when training on GPUs for at "
        f"least {AUTO_COMPILE_MIN_STEPS} steps. The steps that compile are timed apart "
        "(compile_s in metrics.jsonl) and left out of the run's tokens/s and MFU.",
    ),
    click.option(
        "--compile-backend",
        type=click.Choice(COMPILE_BACKENDS),
        default=DEFAULTS.compile_backend,
        show_default=True,
        hidden=True,
        help="torch.compile's backend: inductor generates kernels; aot_eager and eager only "
        "trace, to tell a tracing problem from a code-generation one.",
    ),
    click.option(
        "--bucket-cap-mb",
        type=float,
        default=DEFAULTS.bucket_cap_mb,
        show_default=True,
        help="DDP: gradient bucket size in MB; larger buckets, fewer all-reduce calls.",
    ),
    click.option(
        "--save-steps",
        type=int,
        default=DEFAULTS.save_steps,
        show_default=True,
        help="Checkpoint every N optimizer steps (and at the last); 0: never.",
    ),
    click.option(
        "--keep-checkpoints",
        type=int,
        default=DEFAULTS.keep_checkpoints,
        show_default=True,
        help="Checkpoints kept in the run directory; older ones are deleted.",
    ),
    click.option(
        "--resume",
        is_flag=True,
        help="Continue the run --run-id names, or this cluster's last run, from its last "
        "checkpoint at exactly the next step.",
    ),
    click.option(
        "--checkpoint-on-stop",
        is_flag=True,
        help="When stopped (Ctrl-C, rtk stop, an sbatch job's teardown at its time limit), "
        "finish the step, save a checkpoint and end, so --resume continues there; on "
        "anyway with --save-steps.",
    ),
    click.option(
        "--barrier-every",
        type=int,
        default=DEFAULTS.barrier_every,
        show_default=True,
        help="Every rank meets at a barrier every N optimizer steps, marked in the run "
        "directory so power traces line up across nodes; 0: no barriers.",
    ),
    click.option(
        "--straggle",
        default=DEFAULTS.straggle,
        hidden=True,
        metavar="RANK:SECONDS",
        help="Testing aid: rank RANK sleeps SECONDS before every barrier, so the report's "
        "straggler analysis can be seen to name it.",
    ),
    click.option(
        "--max-failures",
        type=int,
        default=DEFAULTS.max_failures,
        show_default=True,
        help="Restarts from the last checkpoint after a worker is lost; 0: the first loss "
        "ends the run.",
    ),
    *STALL_OPTIONS,
    *POWER_OPTIONS,
    click.option(
        "--restart-wait-s",
        type=float,
        default=DEFAULTS.restart_wait_s,
        show_default=True,
        help="After a failure, the seconds a restart waits for the workers' resources "
        "(a lost node coming back) before it counts as failed too.",
    ),
    output_options,
    click.option(
        "--seed",
        type=int,
        default=DEFAULTS.seed,
        show_default=True,
        help="Seed of the weights' initialisation and the data order.",
    ),
    click.option(
        "--data",
        default=DEFAULTS.data,
        help="A text file on the nodes, read as bytes (tokens 0-255); default: a learnable "
        "synthetic task, nothing to download.",
    ),
    click.option(
        "--log-every",
        type=int,
        default=DEFAULTS.log_every,
        show_default=True,
        help="Print a step's loss, tokens/s and step time every N steps (metrics.jsonl keeps "
        "every step).",
    ),
    click.option(
        "--telemetry/--no-telemetry",
        default=DEFAULTS.telemetry,
        show_default=True,
        help="Sample power, GPUs and hosts on every node during the run, then report.",
    ),
    click.option(
        "--baseline-s",
        type=float,
        default=DEFAULTS.baseline_s,
        show_default=True,
        help="Before training, record the cluster's idle power for this many seconds "
        "(idle.json); 0: none.",
    ),
    click.option(
        "--cooldown-max-s",
        type=float,
        default=DEFAULTS.cooldown_max_s,
        show_default=True,
        help="After training, sample until power is back near the baseline and the "
        "temperature stops moving, at most this many seconds (idle.json); 0: none.",
    ),
    click.option(
        "--preflight/--no-preflight",
        default=True,
        show_default=True,
        help="Run the fast preflight checks first (saved as preflight.json in the run "
        "directory); a failed check stops before training.",
    ),
    telemetry_options,
    click.option(
        "--ray-address",
        default="auto",
        show_default=True,
        callback=lambda ctx, param, value: _ray_address(value),
        help="Which cluster, as Ray names it: auto (the inventory's; without one, "
        "$RAY_ADDRESS's or the --local cluster's), HOST:PORT (a head's GCS), ray://HOST:PORT "
        "(its Ray Client port) or http://HOST:PORT (its dashboard), for a cluster rtk "
        "brought up. The job's driver runs on the head either way.",
    ),
    click.option(
        "--driver",
        type=click.Choice([d.value for d in Driver]),
        default=Driver.AUTO.value,
        show_default=True,
        help="Where the job's driver starts: job: through Ray's Jobs API (rtk jobs, logs "
        "and stop reach it); local: as a process of this command, which must run on the "
        "head, as Ray's SLURM template starts its program (no job supervisor to start "
        "first: the first step comes seconds sooner; rtk logs and stop do not reach it); "
        "auto: local inside a SLURM allocation on the head (an rtk sbatch job), else job.",
    ),
    click.option(
        "--up",
        "bring_up",
        is_flag=True,
        help="Bring the cluster up first, in this same command, as rtk up --no-preflight "
        "would (it stays up: rtk down after). With a local driver (--driver), the driver "
        "starts as soon as the head has its files and imports torch and Ray while the "
        "nodes join, so training starts seconds sooner; rtk's sbatch train template "
        "uses it.",
    ),
    click.option(
        "--timings",
        "show_timings",
        is_flag=True,
        help="Print where the seconds went at the end: preflight, job start, to the first "
        "step, training, report (as seen from here, to about a second).",
    ),
]


def train_options(func: F) -> F:
    """Add ``rtk train``'s options after the inventory's and before ``--dry-run``."""
    for option in reversed(_OPTIONS):
        func = option(func)
    return func
