"""Stage ray-profile: ``rtk profile`` over two power limits through Ray, then put back.

The experiment (written here: this machine's one-node inventory, ddp at 125M in bf16
for a few steps, ``power_limit_w`` at 80% and 60% of the default) runs as rtk profile
runs any sweep: per limit, the limit set on the GPUs through rtk's node script, a Ray
job with telemetry, its report, the limit put back. NVML is read before and after: each
GPU's limit must be back where it was (the default, unless someone had changed it).
``rtk profile`` is given less than the stage's time, so that when a limit is left
behind, ``rtk profile --restore`` still has time to put it back, and is checked too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpu_acceptance import gpuctl, training
from gpu_acceptance.context import StageContext
from gpu_acceptance.stages.with_ray import common, figures

NAME = "acceptance-power"
RESTORE_RESERVE_S = 45.0  # kept for rtk profile --restore and the NVML reads after
EXAMPLE_LIMITS = ["80% of the default", "60% of the default"]


def steps(ctx: StageContext) -> int:
    """Optimizer steps per run of the sweep."""
    return 10 if ctx.quick else 12


def folder(ctx: StageContext) -> Path:
    """Where the experiment, its inventory and the sweep go."""
    return ctx.work_dir / "profile"


def experiment(ctx: StageContext, limits: list[Any]) -> dict[str, Any]:
    """The experiment file's content (JSON is YAML): one run per power limit."""
    train = training.train_config(Path("."), steps(ctx), {"strategy": "ddp"})
    del train["run_dir"]
    train |= {"power_rate_hz": 50.0, "num_workers": max(len(ctx.gpus), 1)}
    return {
        "name": NAME,
        "inventory": "inventory.yaml",
        "output_dir": str(folder(ctx) / "sweep"),
        "workload": {"train": train},
        "axes": {"power_limit_w": limits},
        "repeats": 1,
        "baseline_s": 0.0,
        "cooldown_max_s": 0.0,
    }


def write_files(ctx: StageContext, limits: list[Any]) -> Path:
    """Write the inventory (rtk's ``--local`` one) and the experiment; the experiment's path."""
    from toolkit.inventory.loader import EMBEDDED_DEFAULT

    folder(ctx).mkdir(parents=True, exist_ok=True)
    (folder(ctx) / "inventory.yaml").write_text(EMBEDDED_DEFAULT, encoding="utf-8")
    path = folder(ctx) / "experiment.yaml"
    path.write_text(json.dumps(experiment(ctx, limits), indent=2) + "\n", encoding="utf-8")
    return path


def commands(ctx: StageContext) -> list[list[str]]:
    """The sweep (the cluster stays up for ray-down), and the restore if a limit stays."""
    path = str(folder(ctx) / "experiment.yaml")
    return [
        common.rtk(ctx, "profile", path, "--keep-cluster"),
        common.rtk(ctx, "profile", path, "--restore"),
    ]


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    return (
        f"as root: rtk profile a ddp 125M bf16 run of {steps(ctx)} steps at two power limits "
        f"({' and '.join(EXAMPLE_LIMITS)}) through Ray; then NVML must read each GPU's "
        "limit as before (rtk profile --restore if not, checked again)"
    )


def run(ctx: StageContext, io: Any) -> None:
    """Sweep, read back, restore if needed."""
    if not ctx.ray:
        raise io.skip(common.NO_RAY)
    if os.geteuid() != 0:
        raise io.skip(common.ROOT_ONLY)
    repo = Path(ctx.repo)
    before = gpuctl.settings(ctx.python, repo)
    io.measure("before", before)
    limits = figures.profile_limits(before)
    io.measure("limits_w", limits)
    if limits is None:
        io.error("NVML gives no default and minimum power limit to pick two limits from")
        return
    write_files(ctx, limits)
    sweep_argv, restore_argv = commands(ctx)
    deadline = common.Deadline(ctx.stage_timeout_s, reserve_s=RESTORE_RESERVE_S)
    done = common.run(ctx, sweep_argv, deadline.cap(deadline.left_s()))
    io.measure("rtk_profile", common.outcome(done))
    if not done.ok:
        io.error(f"rtk profile failed: {done.why()}")
    runs_csv = folder(ctx) / "sweep" / "runs.csv"
    runs = figures.sweep_runs(runs_csv.read_text(encoding="utf-8")) if runs_csv.exists() else []
    io.measure("runs", runs)
    for r in runs:
        if r["status"] != "succeeded":
            io.error(f"run at {r['power_limit_w']} W: {r['status']}: {r['error']}")
    check = figures.restore_check(before, gpuctl.settings(ctx.python, repo))
    io.measure("after", check)
    if not check["restored"]:
        restored = common.run(ctx, restore_argv, 30.0)
        again = figures.restore_check(before, gpuctl.settings(ctx.python, repo))
        io.measure("after_rtk_profile_restore", {**common.outcome(restored), **again})
        for problem in check["problems"]:
            io.error(f"left behind by rtk profile: {problem}")
        for problem in again["problems"]:
            io.error(f"still after rtk profile --restore: {problem}")
    io.summary(_summary(runs, check))


def _summary(runs: list[dict[str, Any]], check: dict[str, Any]) -> str:
    parts = []
    for r in runs:
        tps, watts, limit = r.get("tokens_per_s"), r.get("avg_power_w"), r.get("power_limit_w")
        text = (f"{limit:g} W" if isinstance(limit, float) else "? W") + f": {r['status']}"
        if isinstance(tps, float):
            text += f", {tps / 1000:.0f}k tok/s"
        if isinstance(watts, float):
            text += f" at {watts:.0f} W"
        parts.append(text)
    back = "restored" if check["restored"] else "NOT restored"
    at_default = all(g["at_default"] for g in check["per_gpu"].values())
    return (
        "; ".join(parts or ["no run recorded"])
        + f"; limits {back}"
        + (" (NVML reads the default)" if check["restored"] and at_default else "")
    )
