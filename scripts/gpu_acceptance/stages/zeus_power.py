"""Stage zeus-power: Zeus's GlobalPowerLimitOptimizer on the model ray-power trains.

The peer's choice beside rtk's: ``gpu_acceptance.zeus_loop`` trains rtk's 350M GPT in
bf16 on GPU 0 with Zeus's optimizer (its grid top down, 25 W apart, the same 5% bound
as rtk's optimize), then a settled window at the limit Zeus chose. Recorded: Zeus's
choice and its measurements per limit; by Zeus's own figures, the energy and time per
step at the chosen limit against the highest; the seconds its profile took; and rtk's
choice from ray-power's ``power.jsonl`` when that stage ran first. NVML is read before
and after: the limit must be back (Zeus puts the highest back at exit).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpu_acceptance import gpuctl, procs, training
from gpu_acceptance.context import StageContext
from gpu_acceptance.stages.with_ray import common, figures

MODEL_SIZE = "350M"
RESULT = "zeus-result.json"


def config(ctx: StageContext) -> dict[str, Any]:
    """The loop's settings: rtk's bound and batch, Zeus's default grid step."""
    return {
        "model_size": MODEL_SIZE,
        "batch_size": 8,
        "max_slowdown": 0.05,
        "warmup_steps": 2,
        "profile_steps": 5 if ctx.quick else 10,
        "pl_step_w": 25,
        "settled_steps": 30 if ctx.quick else 100,
        "max_steps": 600,
    }


def result_path(ctx: StageContext) -> Path:
    """Where the loop writes its answer."""
    return ctx.work_dir / RESULT


def commands(ctx: StageContext) -> list[list[str]]:
    """The loop under Zeus."""
    argv = [ctx.python, "-m", "gpu_acceptance.zeus_loop", json.dumps(config(ctx))]
    return [[*argv, str(result_path(ctx))]]


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    c = config(ctx)
    return (
        f"as root: train rtk's {MODEL_SIZE} GPT in bf16 without Ray under Zeus's "
        f"GlobalPowerLimitOptimizer ({c['pl_step_w']} W grid, {c['warmup_steps']}+"
        f"{c['profile_steps']} steps a limit, at most {c['max_slowdown']:.0%} slower), then "
        f"{c['settled_steps']} steps at its choice: Zeus's limit beside rtk's"
    )


def zeus_figures(answer: dict[str, Any]) -> dict[str, Any]:
    """By Zeus's own measurements: the chosen limit against the highest, per step."""
    rows = answer.get("measurements") or []
    chosen = answer.get("chosen_limit_w")
    top = max(rows, key=lambda m: m["limit_w"]) if rows else None
    mine = next((m for m in rows if m["limit_w"] == chosen), None)
    found: dict[str, Any] = {"chosen_limit_w": chosen, "limits_profiled": len(rows)}
    if top and mine and top["energy_j"] and top["time_s"]:
        found["energy_saved"] = 1 - mine["energy_j"] / top["energy_j"]
        found["slowdown"] = mine["time_s"] / top["time_s"] - 1
        found["highest_limit_w"] = top["limit_w"]
    return found


def rtk_choice(ctx: StageContext) -> dict[str, Any] | None:
    """The settled decision of rtk's optimize in ray-power's run, when it ran."""
    path = training.ray_runs_dir(ctx) / "power-optimize" / "power.jsonl"
    if not path.exists():
        return None
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if line.get("kind") == "decision" and line.get("settled"):
            return {k: line.get(k) for k in ("reason", "limits_w", "limit_w", "step") if k in line}
    return None


def run(ctx: StageContext, io: Any) -> None:
    """Zeus's loop, its figures, rtk's choice beside, the limit read back."""
    if not ctx.has("zeus"):
        raise io.skip("zeus does not import")
    if os.geteuid() != 0:
        raise io.skip("needs root: Zeus sets the GPU's power limit")
    repo = Path(ctx.repo)
    before = gpuctl.settings(ctx.python, repo)
    io.measure("before", before)
    deadline = common.Deadline(ctx.stage_timeout_s, reserve_s=8.0)
    result_path(ctx).unlink(missing_ok=True)
    done = procs.run(commands(ctx)[0], deadline.cap(deadline.left_s()), env=ctx.env(), cwd=ctx.repo)
    io.measure("zeus_loop", common.outcome(done, 2000))
    answer: dict[str, Any] = {}
    if result_path(ctx).exists():
        answer = json.loads(result_path(ctx).read_text(encoding="utf-8"))
    io.measure("zeus", answer)
    if not done.ok or not answer:
        io.error(f"the loop under Zeus failed: {done.why(800)}")
    found = zeus_figures(answer)
    io.measure("compared", found)
    rtk = rtk_choice(ctx)
    io.measure("rtk_optimize_choice", rtk)
    check = figures.restore_check(before, gpuctl.settings(ctx.python, repo))
    io.measure("after", check)
    for problem in check["problems"]:
        io.error(f"left behind by Zeus: {problem}")
    if found.get("chosen_limit_w") is None:
        io.error("Zeus chose no limit (profile cut short?)")
        return
    text = f"Zeus chose {found['chosen_limit_w']} W of {found['limits_profiled']} profiled"
    if "energy_saved" in found:
        text += (
            f" ({found['energy_saved']:.1%} less energy, {found['slowdown']:+.1%} time per step "
            f"against {found['highest_limit_w']} W, by its own profile)"
        )
    if answer.get("profiling_s") is not None:
        text += f"; profiling took {answer['profiling_s']:.0f} s"
    io.summary(text + (f"; rtk optimize: {rtk.get('reason')}" if rtk else ""))
