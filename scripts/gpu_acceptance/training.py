"""One training run with telemetry: through ``rtk train --local`` (Ray) or without Ray.

Without Ray, the trainer runs as ``gpu_acceptance.trainer`` (rtk's loop, rank 0 of 1)
with ``LocalTelemetry`` beside it, and the report is built from the run directory.
With Ray, ``rtk train --local`` does all of it itself (the sampler a Ray actor, the
report built at the end); the stage reads it back with ``rtk report``. The metrics'
figures are the same keys either way.
"""

from __future__ import annotations

import json
import shutil
import socket
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpu_acceptance import procs
from gpu_acceptance.context import StageContext
from gpu_acceptance.telemetry import LocalTelemetry, report_figures

MODEL_SIZE = "125M"
PRECISION = "bf16"
BARRIER_EVERY = 10
WARMUP_STEPS = 3  # steps left out of the medians (CUDA init, allocator, autotuning)
# GPT-3's rate for its 125M model, reached after a short linear warm-up. rtk's default
# (3e-3, no warm-up) suits the tiny GPT; at 125M it makes every strategy's loss spike
# within 12 steps, and which run's last step lands on a spike is chance (2026-11-26:
# ZeRO-3 with and without optimizer offload agreed to 1e-3 for 11 steps, then 6.6 vs 7.7).
LEARNING_RATE = 6e-4
LR_WARMUP_STEPS = 4
RESULT_FILE = "acceptance-result.json"  # what the trainer without Ray writes in its run dir


def train_config(run_dir: Path, steps: int, options: dict[str, Any]) -> dict[str, Any]:
    """The ``TrainConfig`` fields of one acceptance run (125M, bf16)."""
    return {
        "run_dir": str(run_dir),
        "model_size": MODEL_SIZE,
        "precision": PRECISION,
        "learning_rate": LEARNING_RATE,
        "warmup_steps": LR_WARMUP_STEPS,
        "max_steps": steps,
        "barrier_every": BARRIER_EVERY if steps > BARRIER_EVERY else 0,
        "log_every": 5,
        **options,
    }


def metrics_figures(path: Path, skip: int = WARMUP_STEPS) -> dict[str, Any]:
    """Medians of ``metrics.jsonl`` after the first ``skip`` steps, and the losses.

    Steps that compiled the model (``compile_s``, ``--compile``) are never steady.
    """
    lines = []
    if path.exists():
        for text in path.read_text(encoding="utf-8").splitlines():
            try:
                lines.append(json.loads(text))
            except ValueError:
                continue
    steady = lines[skip:] if len(lines) > skip else lines
    steady = [line for line in steady if not line.get("compile_s")] or steady

    def median(key: str) -> float | None:
        values = [float(x[key]) for x in steady if isinstance(x.get(key), (int, float))]
        return statistics.median(values) if values else None

    return {
        "steps": len(lines),
        "tokens_per_step": lines[-1].get("tokens") if lines else None,
        "median_tokens_per_s": median("tokens_per_s"),
        "median_step_time_s": median("step_time_s"),
        "median_mfu": median("mfu"),
        "first_loss": lines[0].get("loss") if lines else None,
        "last_loss": lines[-1].get("loss") if lines else None,
    }


def trainer_argv(
    ctx: StageContext, config: dict[str, Any], result_path: Path, kernels: int = 0
) -> list[str]:
    """The command line of one run without Ray (``kernels``: profile, keep the N heaviest)."""
    argv = [ctx.python, "-m", "gpu_acceptance.trainer", json.dumps(config), str(result_path)]
    return [*argv, "--kernels", str(kernels)] if kernels else argv


def local_run(
    ctx: StageContext,
    name: str,
    options: dict[str, Any],
    steps: int,
    timeout_s: float,
    kernels: int = 0,
) -> dict[str, Any]:
    """Train ``name`` without Ray, sampled beside; its figures (``error`` when it failed).

    ``options`` override ``train_config``'s fields; ``kernels``: profile the run and
    keep its N heaviest CUDA kernels (``kernels`` in the figures).
    """
    run_dir = ctx.work_dir / "runs" / name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    result_path = run_dir / RESULT_FILE
    config = train_config(run_dir, steps, options)
    node = socket.gethostname()
    with LocalTelemetry(run_dir, node) as telemetry:
        done = procs.run(
            trainer_argv(ctx, config, result_path, kernels),
            timeout_s,
            env=ctx.env(RTK_NODE=node),
            cwd=ctx.repo,
        )
    figures: dict[str, Any] = {"seconds": round(done.duration_s, 2), "sampler": telemetry.stats}
    figures["metrics"] = metrics_figures(run_dir / "metrics.jsonl")
    if not done.ok:
        figures["error"] = done.why(1500)
        return figures
    result = json.loads(result_path.read_text(encoding="utf-8"))
    figures["backend"] = result.get("backend")
    figures["peak_memory_allocated_gib"] = _gib(result.get("peak_memory_allocated_bytes"))
    figures["peak_memory_reserved_gib"] = _gib(result.get("peak_memory_reserved_bytes"))
    if "kernels" in result:
        figures["kernels"] = result["kernels"]
    try:
        figures["report"] = report_figures(run_dir)
    except Exception as e:  # noqa: BLE001 - a report that does not build is the finding
        figures["error"] = f"the report did not build: {type(e).__name__}: {e}"
    return figures


def _gib(value: Any) -> float | None:
    return value / 2**30 if isinstance(value, (int, float)) else None


def rtk_argv(
    ctx: StageContext,
    name: str,
    options: dict[str, Any],
    steps: int,
    *,
    model_size: str = MODEL_SIZE,
    extra: Sequence[str] = (),
) -> list[str]:
    """``rtk train --local`` for one strategy (the Ray path), telemetry on, ``extra`` last.

    Without rtk train's own preflight: stage ray-preflight runs it once, with its load test.
    """
    argv = [ctx.python, "-m", "toolkit", "train", "--local", "--model-size", model_size]
    argv += ["--precision", PRECISION, "--strategy", options["strategy"]]
    argv += ["--learning-rate", str(LEARNING_RATE), "--warmup-steps", str(LR_WARMUP_STEPS)]
    argv += ["--max-steps", str(steps), "--num-workers", str(max(len(ctx.gpus), 1))]
    argv += ["--output-dir", str(ray_runs_dir(ctx)), "--run-id", name]
    argv += ["--telemetry", "--power-rate-hz", "50", "--log-every", "5", "--no-preflight"]
    if steps > BARRIER_EVERY:
        argv += ["--barrier-every", str(BARRIER_EVERY)]
    if "zero_stage" in options:
        argv += ["--zero-stage", str(options["zero_stage"])]
    if options.get("offload_optimizer"):
        argv.append("--offload-optimizer")
    return [*argv, *extra]


def ray_runs_dir(ctx: StageContext) -> Path:
    """Where ``rtk train --local`` puts the acceptance's run directories."""
    return ctx.work_dir / "ray-runs"


def ray_run(
    ctx: StageContext,
    name: str,
    options: dict[str, Any],
    steps: int,
    timeout_s: float,
    *,
    model_size: str = MODEL_SIZE,
    extra: Sequence[str] = (),
    skip: int = WARMUP_STEPS,
) -> dict[str, Any]:
    """Train ``name`` with ``rtk train --local`` (a Ray head must be up); its figures.

    The medians of ``metrics.jsonl`` after ``skip`` steps, the sampler's outcome (the
    NVML sampler runs as a Ray actor; the manifest says what it recorded) and the most
    GPU memory NVML saw in use; ``error`` when the run failed.
    """
    run_dir = ray_runs_dir(ctx) / name
    shutil.rmtree(run_dir, ignore_errors=True)  # a run directory left over would resume
    argv = rtk_argv(ctx, name, options, steps, model_size=model_size, extra=extra)
    done = procs.run(argv, timeout_s, env=ctx.env(), cwd=ctx.repo)
    figures: dict[str, Any] = {"seconds": round(done.duration_s, 2), "rc": done.rc}
    figures["metrics"] = metrics_figures(run_dir / "metrics.jsonl", skip)
    figures["sampler"] = sampler_figures(run_dir)
    figures["peak_gpu_memory_used_gib_nvml"] = _peak_memory(run_dir)
    if not done.ok:
        figures["error"] = done.why(1500)
    return figures


def sampler_figures(run_dir: Path) -> dict[str, Any]:
    """Per node of the run's telemetry manifest: its status and the samples it kept."""
    path = run_dir / "telemetry" / "manifest.json"
    if not path.exists():
        return {"error": "no telemetry/manifest.json"}
    nodes = json.loads(path.read_text(encoding="utf-8")).get("nodes") or {}
    return {
        name: {
            "status": node.get("status"),
            "samples": (node.get("sampler") or {}).get("samples"),
            "error": node.get("error"),
        }
        for name, node in nodes.items()
    }


def _peak_memory(run_dir: Path) -> dict[str, float]:
    from gpu_acceptance.samples import read_samples
    from gpu_acceptance.stages.with_ray.figures import peak_memory_gib

    traces = sorted((run_dir / "telemetry" / "nodes").glob("*/trace-*.arrows"))
    return peak_memory_gib(read_samples(traces)) if traces else {}
