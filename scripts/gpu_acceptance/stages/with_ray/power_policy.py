"""Stage ray-power: ``rtk train --power-policy optimize`` against the default limit.

Two runs of the same compute-bound training (DDP, 350M, bf16) through ``rtk train
--local``, the same number of steps: one at the GPUs' default limit (``measure``), one
with ``optimize``, which profiles a grid of limits after its warm-up and keeps the one
with the least energy per step within 5% of the fastest. Compared over the steps after
optimize settled (``power.jsonl``), from each run's own report (``summary.json``: each
step's energy and length, the same source for both): the energy per step (the same
tokens per step, so per token) saved and the time per step lost. Target: at least 10%
less energy at no more than 5% slowdown. NVML is read before and after: the limits
must be back at the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpu_acceptance import gpuctl, training
from gpu_acceptance.context import StageContext
from gpu_acceptance.stages.with_ray import common, figures

OPTIONS: dict[str, Any] = {"strategy": "ddp"}
MODEL_SIZE = "350M"
RUNS = (("power-measure", "measure"), ("power-optimize", "optimize"))


def steps(ctx: StageContext) -> int:
    """Optimizer steps of each run: the profile (up to 21 limits) and a settled stretch.

    The driver polls the markers about once a second, so at 50-60 ms a step each
    window holds 10-20 steps whatever ``steps_per_limit`` says (seen on the first GPU
    machine). With ``--essentials``, 400 steps: the warm-up, the limits profiled until
    the choice, and a settled window of 100 steps to compare.
    """
    if ctx.essentials:
        return 400
    return 260 if ctx.quick else 360


def extra(ctx: StageContext, policy: str) -> list[str]:
    """The power policy; with ``--essentials`` no compiling (41 s a run on the H200)."""
    return ["--power-policy", policy, *(["--compile", "off"] if ctx.essentials else [])]


def commands(ctx: StageContext) -> list[list[str]]:
    """The two runs."""
    return [
        training.rtk_argv(
            ctx, name, OPTIONS, steps(ctx), model_size=MODEL_SIZE, extra=extra(ctx, policy)
        )
        for name, policy in RUNS
    ]


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    return (
        f"as root: train the 350M GPT with ddp in bf16 for {steps(ctx)} steps twice with rtk "
        "train --local, at the default power limit and with --power-policy optimize; energy "
        f"and time per step over the steps after optimize settled (target: at least "
        f"{figures.POWER_SAVING_TARGET:.0%} less energy, at most "
        f"{figures.POWER_SLOWDOWN_TARGET:.0%} slower); the limits back after"
    )


def _read(run_dir: Path, name: str) -> Any:
    path = run_dir / name
    if not path.exists():
        return None
    if name.endswith(".jsonl"):
        return [json.loads(x) for x in path.read_text().splitlines() if x.startswith("{")]
    return json.loads(path.read_text())


def run(ctx: StageContext, io: Any) -> None:
    """Both runs, the comparison, the limits read back."""
    if not ctx.ray:
        raise io.skip(common.NO_RAY)
    import os

    if os.geteuid() != 0:
        raise io.skip(common.ROOT_ONLY)
    repo = Path(ctx.repo)
    before = gpuctl.settings(ctx.python, repo)
    io.measure("before", before)
    deadline = common.Deadline(ctx.stage_timeout_s, reserve_s=10.0)
    per_step: dict[str, Any] = {}
    for index, (name, policy) in enumerate(RUNS):
        share = 1.0 / (len(RUNS) - index)
        done = training.ray_run(
            ctx, name, OPTIONS, steps(ctx), deadline.cap(deadline.left_s() * share),
            model_size=MODEL_SIZE, extra=extra(ctx, policy),
        )  # fmt: skip
        io.measure(name, {k: v for k, v in done.items() if k != "metrics"})
        if "error" in done:
            io.error(f"rtk train --power-policy {policy}: {done['error'][:800]}")
        run_dir = training.ray_runs_dir(ctx) / name
        summary = _read(run_dir / "report", "summary.json") or {}
        per_step[policy] = (summary.get("steps") or {}).get("per_step") or []
    power = _read(training.ray_runs_dir(ctx) / RUNS[1][0], "power.jsonl") or []
    compared = figures.power_policy_figures(per_step["measure"], per_step["optimize"], power)
    io.measure("compared", compared)
    for problem in compared["problems"]:
        io.error(problem)
    check = figures.restore_check(before, gpuctl.settings(ctx.python, repo))
    io.measure("after", check)
    for problem in check["problems"]:
        io.error(f"left behind by --power-policy optimize: {problem}")
    io.summary(figures.power_policy_summary(compared, check))
