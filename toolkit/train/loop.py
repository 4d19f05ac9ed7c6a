"""The training loop every worker runs, independent of who launched it.

``train_worker`` needs an initialised process group (or a world of one) and a
``WorkerContext``: Ray Train provides one (``toolkit.train.ray_worker``), tests can
provide their own. The loop writes markers (every rank) and ``metrics.jsonl``
(rank 0) into the run directory as it goes, and hands checkpoints to the context.

A run that stops with a checkpoint (``TrainConfig.stops_with_checkpoint``) looks for
the run directory's stop request (``RunDir.stop_request``, written by the driver on
SIGINT) after every step. Each rank's look travels with the step's loss all-reduce,
so every rank sees the request at the same step: they save a checkpoint there and
end without ``run_end``, and the next attempt resumes at the following step.

The loop reads from the GPU once per step: the loss of its micro-batches (and the
stop flag) in one tensor, after the optimizer step, so each step's time is the GPU's
and nothing else waits for it. With a compiled model (``--compile``) the steps that
compiled carry ``compile_s`` in ``metrics.jsonl``, and rank 0 ends with the steady
speed of the others (``TrainThroughput``).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TextIO, TypeVar

import torch
import torch.distributed as dist

from toolkit import wallclock
from toolkit.markers.flight import watch as watch_flight
from toolkit.rundir import MarkerWriter, MetricsLine, RunDir, ThroughputSums, metrics_step
from toolkit.train.checkpoint_meta import CheckpointMeta
from toolkit.train.compiling import CompileClock
from toolkit.train.config import TrainConfig
from toolkit.train.data import make_data
from toolkit.train.model import GPT
from toolkit.train.strategies import Strategy, make_strategy

T = TypeVar("T")

# Dense bf16 peak per GPU (TFLOP/s), for the MFU estimate.
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}


class WorkerContext(Protocol):
    """What the loop needs from whoever runs it."""

    rank: int
    local_rank: int
    world_size: int

    def report(self, metrics: MetricsLine, checkpoint_dir: Path | None) -> None:
        """Hand over this step's metrics and, on checkpoint steps, this rank's files."""

    def load_latest(self, load: Callable[[Path], T]) -> T | None:
        """Call ``load`` on the latest checkpoint's directory; None when there is none."""


def train_worker(config: TrainConfig, ctx: WorkerContext) -> MetricsLine | None:
    """Train until ``config.max_steps``; returns the last step's metrics (None: no step ran)."""
    torch.manual_seed(config.seed)
    device = _device(ctx.local_rank)
    shape = config.shape()
    straggler = config.straggler()
    data = make_data(config.data, shape.vocab_size, shape.seq_len, config.seed)
    strategy = make_strategy(
        GPT(shape, config.gradient_checkpointing), config, device, ctx.rank, ctx.local_rank
    )
    run_dir = Path(config.run_dir)
    markers = MarkerWriter(run_dir, ctx.rank, ctx.local_rank, ctx.world_size, _gpu_uuid(device))
    # A stall's collection asks this rank for its Flight Recorder: a thread answers.
    flight = watch_flight(run_dir, ctx.rank)
    saved = ctx.load_latest(strategy.load)
    start = saved.step if saved is not None else 0
    markers.write("run_start", start, strategy=config.strategy, resumed=saved is not None)
    metrics_file = _open_metrics(run_dir, start) if ctx.rank == 0 else None

    tokens_per_step = (
        config.batch_size * config.gradient_accumulation_steps * shape.seq_len * ctx.world_size
    )
    peak_flops = _peak_flops(device)
    compile_clock = CompileClock(strategy.compiled)
    throughput = ThroughputSums()
    stop_request = RunDir(run_dir).stop_request if config.stops_with_checkpoint else None
    last: MetricsLine | None = None
    stopped = False
    try:
        for step in range(start + 1, config.max_steps + 1):
            began = time.monotonic()
            markers.write("step_begin", step)
            strategy.set_learning_rate(_learning_rate(config, step))
            losses = [
                strategy.micro_step(
                    *data.batch(config.batch_size, step, ctx.rank, micro),
                    last=micro == config.gradient_accumulation_steps - 1,
                )
                for micro in range(config.gradient_accumulation_steps)
            ]
            strategy.optimizer_step()
            asked = stop_request is not None and stop_request.exists()
            loss, stop = _reduce_step(torch.stack(losses).float().mean(), asked, device)
            markers.write("step_end", step, loss=loss, tokens=tokens_per_step // ctx.world_size)
            if config.barrier_every and step % config.barrier_every == 0:
                if straggler is not None and straggler[0] == ctx.rank:
                    time.sleep(straggler[1])
                waited = time.monotonic()
                if dist.is_initialized():
                    dist.barrier()
                markers.write("barrier", step, wait_s=time.monotonic() - waited)
            step_s = time.monotonic() - began
            tokens_per_s = tokens_per_step / step_s if step_s > 0 else 0.0
            flops_per_s = shape.flops_per_token() * tokens_per_s
            line = MetricsLine(
                step=step,
                loss=loss,
                step_time_s=step_s,
                tokens=tokens_per_step,
                tokens_per_s=tokens_per_s,
                lr=_learning_rate(config, step),
                wall_s=wallclock.wall_s(),
                mfu=flops_per_s / (ctx.world_size * peak_flops) if peak_flops else None,
                compile_s=compile_clock.step(step_s, first=step == start + 1),
            )
            throughput.add(line)
            last = line
            if metrics_file is not None:
                metrics_file.write(line.to_line())
                if step % config.log_every == 0 or step in (start + 1, config.max_steps):
                    print(
                        f"step {step}/{config.max_steps} loss {loss:.4f} "
                        f"{line.tokens_per_s:,.0f} tok/s {step_s:.3f} s/step",
                        flush=True,
                    )
            checkpointed = False
            if config.save_steps and (step % config.save_steps == 0 or step == config.max_steps):
                _checkpoint(strategy, ctx, markers, step, config, line)
                checkpointed = True
            elif step == config.max_steps:
                # Reports synchronise every rank with Ray Train's controller (about 2 s
                # each in Ray 2.60), so only checkpoints and the last step report;
                # per-step metrics go to metrics.jsonl and the markers.
                ctx.report(line, None)
            if stop and step < config.max_steps:
                if not checkpointed:
                    _checkpoint(strategy, ctx, markers, step, config, line)
                markers.write("stop", step)
                if ctx.rank == 0:
                    print(
                        f"rtk train: asked to stop: stopped after step {step} with a "
                        f"checkpoint; resuming continues at step {step + 1}",
                        flush=True,
                    )
                stopped = True
                break

        if not stopped:
            markers.write("run_end", config.max_steps)
        if ctx.rank == 0 and strategy.compiled:
            print(f"rtk train: {_throughput_text(throughput)}", flush=True)
    finally:
        markers.close()
        if flight is not None:
            flight.stop()
        if metrics_file is not None:
            metrics_file.close()
    return last


def _checkpoint(
    strategy: Strategy,
    ctx: WorkerContext,
    markers: MarkerWriter,
    step: int,
    config: TrainConfig,
    metrics: MetricsLine,
) -> None:
    meta = CheckpointMeta(
        step=step,
        next_step=step + 1,
        seed=config.seed,
        world_size=ctx.world_size,
        strategy=config.strategy,
    )
    with tempfile.TemporaryDirectory(prefix="rtk-ckpt-") as tmp:
        wrote = strategy.save(Path(tmp), meta)
        markers.write("checkpoint", step)
        ctx.report(metrics, Path(tmp) if wrote else None)


def _learning_rate(config: TrainConfig, step: int) -> float:
    """Linear warmup, then constant.

    It depends on the step alone, never on max_steps, so a run resumed with a larger
    --max-steps continues on the same schedule.
    """
    if config.warmup_steps and step <= config.warmup_steps:
        return config.learning_rate * step / config.warmup_steps
    return config.learning_rate


def _reduce_step(loss: torch.Tensor, stop: bool, device: torch.device) -> tuple[float, bool]:
    """The loss averaged over the ranks, and whether any rank was asked to stop.

    One all-reduce carries both, so a stop request costs no collective of its own and
    every rank stops after the same step; one read brings both to the host.
    """
    if not dist.is_initialized():
        return float(loss), stop
    flag = torch.tensor([1.0 if stop else 0.0], device=device)
    tensor = torch.cat([loss.reshape(1).to(device), flag])
    dist.all_reduce(tensor)
    total, stops = tensor.tolist()
    return total / dist.get_world_size(), stops > 0


def _device(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        # fp32 matmuls on tensor cores (TF32), as real trainers run them; bf16 and
        # fp16 autocast are not affected.
        torch.set_float32_matmul_precision("high")
        return device
    return torch.device("cpu")


def _gpu_uuid(device: torch.device) -> str | None:
    if device.type != "cuda":
        return None
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def _peak_flops(device: torch.device) -> float | None:
    """The GPU's dense bf16 peak in FLOP/s, for the MFU; None on CPUs and unknown GPUs."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    peak = next((v for k, v in PEAK_TFLOPS.items() if k in name), None)
    return peak * 1e12 if peak is not None else None


def _throughput_text(sums: ThroughputSums) -> str:
    """The run's steady speed, the compiling steps apart (rank 0's last line)."""
    figures = sums.figures()
    compiled = (
        f"compiling took {figures.compile_s:.1f} s in {figures.compile_steps} step(s)"
        if figures.compile_s is not None
        else "no step compiled"
    )
    if figures.tokens_per_s is None:
        return f"{compiled}; no other steps to time"
    mfu = f", MFU {figures.mfu:.2f}" if figures.mfu is not None else ""
    return f"{compiled}; the {figures.steps} other step(s): {figures.tokens_per_s:,.0f} tok/s{mfu}"


def _open_metrics(run_dir: Path, start: int) -> TextIO:
    """Open metrics.jsonl to append after step ``start``.

    Steps past ``start`` come from an attempt that failed before its next checkpoint;
    they are about to be trained again, so they move to metrics.superseded.jsonl and
    metrics.jsonl keeps every step exactly once.
    """
    layout = RunDir(run_dir)
    path = layout.metrics
    if path.exists():
        kept: list[str] = []
        superseded: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
            step = metrics_step(line)
            if step is None:
                continue  # a line cut short by the crash
            (kept if step <= start else superseded).append(line)
        if superseded:
            with layout.superseded_metrics.open("a", encoding="utf-8") as out:
                out.writelines(superseded)
        path.write_text("".join(kept), encoding="utf-8")
    return path.open("a", encoding="utf-8", buffering=1)
