"""Stage ray-mfu: DDP at 350M in bf16, compiled, through ``rtk train --local``.

``--compile on``: the steps that compiled (``compile_s`` in ``metrics.jsonl``) give the
compile time and are left out of the rates, so the MFU is the compiled model's steady
one (target >= 0.40). Below the target, the same run in the trainer's loop without
Ray goes under ``torch.profiler`` for a few steps, and its ten heaviest CUDA kernels
are recorded: where the time goes.
"""

from __future__ import annotations

import json
from typing import Any

from gpu_acceptance import training
from gpu_acceptance.context import StageContext
from gpu_acceptance.stages.with_ray import common, figures

NAME = "ddp-350m-compiled"
OPTIONS: dict[str, Any] = {"strategy": "ddp"}
MODEL_SIZE = "350M"
PROFILED_STEPS = 8
TOP = 10


def steps(ctx: StageContext) -> int:
    """Optimizer steps of the compiled run."""
    return 15 if ctx.quick else 20


def profiled_options() -> dict[str, Any]:
    """The loop without Ray that is profiled: the same model, compiled the same way."""
    return {**OPTIONS, "model_size": MODEL_SIZE, "compile": "on"}


def commands(ctx: StageContext) -> list[list[str]]:
    """``rtk train`` compiled; the profiled loop (run only below the MFU target)."""
    run_dir = ctx.work_dir / "runs" / "mfu-kernels"
    config = training.train_config(run_dir, PROFILED_STEPS, profiled_options())
    return [
        training.rtk_argv(
            ctx, NAME, OPTIONS, steps(ctx), model_size=MODEL_SIZE, extra=["--compile", "on"]
        ),
        training.trainer_argv(ctx, config, run_dir / training.RESULT_FILE, TOP),
    ]


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    return (
        f"train the 350M GPT with ddp in bf16 for {steps(ctx)} steps with rtk train --local "
        f"--compile on: MFU after compiling (target >= {figures.MFU_TARGET}) and the compile "
        f"time apart; below the target, profile {PROFILED_STEPS} steps of the loop without "
        f"Ray and record the top {TOP} CUDA kernels"
    )


def run(ctx: StageContext, io: Any) -> None:
    """The compiled run; the kernels when its MFU falls short."""
    if not ctx.ray:
        raise io.skip(common.NO_RAY)
    deadline = common.Deadline(ctx.stage_timeout_s, reserve_s=5.0)
    # The rest for the profiled loop, which runs only below the target; with
    # --essentials the compiled run comes first (it met the target on the H200).
    timeout_s = deadline.cap(deadline.left_s() * (0.9 if ctx.essentials else 0.65))
    run = training.ray_run(
        ctx, NAME, OPTIONS, steps(ctx), timeout_s, model_size=MODEL_SIZE, extra=["--compile", "on"]
    )
    path = training.ray_runs_dir(ctx) / NAME / "metrics.jsonl"
    lines = (
        [
            json.loads(x)
            for x in path.read_text().splitlines()
            if x.startswith("{") and x.endswith("}")
        ]
        if path.exists()
        else []
    )
    compiled = figures.compiled_figures(lines)
    io.measure("rtk_train", {k: v for k, v in run.items() if k != "metrics"})
    io.measure("compiled", compiled)
    if "error" in run:
        io.error(f"rtk train --compile on: {run['error'][:800]}")
    if not compiled["compile_steps"] and lines:
        io.error("no step recorded compile_s: the model did not compile (--compile on)")
    if compiled["mfu"] is None:
        io.error("no MFU in metrics.jsonl (a GPU whose peak rtk does not know?)")
    elif not compiled["meets_target"]:
        findings = [
            f"MFU {compiled['mfu']:.3f} at 350M ddp bf16 compiled, below {figures.MFU_TARGET}"
        ]
        io.measure("findings", findings)
        if deadline.left_s() >= 60:
            loop = training.local_run(
                ctx,
                "mfu-kernels",
                profiled_options(),
                PROFILED_STEPS,
                deadline.cap(deadline.left_s()),
                TOP,
            )
            io.measure("profiled_loop", loop)
            if "error" in loop:
                io.error(f"the profiled loop failed: {loop['error'][:600]}")
        else:
            io.error(f"no time left to profile the kernels ({deadline.left_s():.0f} s)")
    io.summary(_summary(compiled, io.result.measurements.get("profiled_loop")))


def _summary(compiled: dict[str, Any], loop: dict[str, Any] | None) -> str:
    mfu, compile_s, tps = compiled["mfu"], compiled["compile_s"], compiled["tokens_per_s"]
    text = (
        (f"MFU {mfu:.3f}" if mfu is not None else "MFU ?")
        + f" (target {figures.MFU_TARGET}), "
        + (f"{tps / 1000:.0f}k tok/s" if tps else "? tok/s")
        + f" over {compiled['steady_steps']} steps; compile "
        + (f"{compile_s:.1f} s" if compile_s is not None else "?")
        + f" in {compiled['compile_steps']} step(s)"
    )
    kernels = (loop or {}).get("kernels") or []
    if kernels:
        text += "; top kernel " + f"{kernels[0]['kernel'][:60]} ({kernels[0]['share']:.0%})"
    return text
