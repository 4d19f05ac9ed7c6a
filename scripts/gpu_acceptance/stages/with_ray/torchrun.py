"""Stage ray-torchrun: a user's plain DDP script under ``rtk torchrun --local --auto-steps``.

The user's path: ``gpu_acceptance/plain_torch.py`` (an MLP in DDP that imports
nothing of rtk) is copied into a folder of its own, shipped as the working directory,
and started by rtk's torchrun on every GPU of this one-node cluster, on NCCL, while the
samplers record. ``--auto-steps`` counts its steps from ``optimizer.step()``. Then
``rtk report --json``: the steps it found (every one the script took), each step's
energy, and each GPU's power.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from gpu_acceptance import training
from gpu_acceptance.context import StageContext
from gpu_acceptance.stages.with_ray import common, figures

SCRIPT = common.PLAIN_TORCH
RUN_ID = "plain-ddp"


def steps(ctx: StageContext) -> int:
    """Steps the script takes (one rank's optimizer steps)."""
    return 1000 if ctx.quick else 3000  # about 10 ms a step on an H200: 10 s, 30 s


def job_dir(ctx: StageContext) -> Path:
    """The working directory shipped with the job: the script alone."""
    return ctx.work_dir / "torchrun-job"


def commands(ctx: StageContext) -> list[list[str]]:
    """``rtk torchrun --local --auto-steps ... -- plain_torch.py``, then ``rtk report``."""
    run = common.rtk(ctx, "torchrun", "--local", "--auto-steps")
    run += ["--working-dir", str(job_dir(ctx)), "--output-dir", str(training.ray_runs_dir(ctx))]
    run += ["--run-id", RUN_ID, "--power-rate-hz", "50"]
    run += ["--", SCRIPT.name, "--steps", str(steps(ctx))]
    run_dir = str(training.ray_runs_dir(ctx) / RUN_ID)
    return [run, common.rtk(ctx, "report", run_dir, "--json")]


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    return (
        f"run a plain PyTorch DDP script ({steps(ctx)} steps of an MLP on NCCL, nothing of "
        "rtk imported) with rtk torchrun --local --auto-steps, one rank per GPU, then rtk "
        "report: the steps found, energy per step, each GPU's power"
    )


def step_figures(summary: dict[str, Any]) -> dict[str, Any]:
    """The steps the report found and their energy and length (medians of complete ones)."""
    rows = (summary.get("steps") or {}).get("per_step") or []
    done = [r for r in rows if r.get("complete")]
    energies = [float(r["energy_j"]) for r in done if r.get("energy_j") is not None]
    lengths = [float(r["duration_s"]) for r in done if r.get("duration_s") is not None]
    return {
        "steps_found": len(rows),
        "steps_complete": len(done),
        "median_step_energy_j": statistics.median(energies) if energies else None,
        "median_step_s": statistics.median(lengths) if lengths else None,
    }


def run(ctx: StageContext, io: Any) -> None:
    """Run the script through rtk torchrun, report it."""
    if not ctx.ray:
        raise io.skip(common.NO_RAY)
    run_argv, report_argv = commands(ctx)
    common.fresh_job(job_dir(ctx), SCRIPT, training.ray_runs_dir(ctx) / RUN_ID)
    deadline = common.Deadline(ctx.stage_timeout_s, reserve_s=5.0)
    ran = common.run(ctx, run_argv, deadline.cap(deadline.left_s() - 20.0))
    io.measure("rtk_torchrun", common.outcome(ran, 2500))
    if not ran.ok:
        io.error(f"rtk torchrun failed: {ran.why()}")
    io.measure("script_said", [x for x in ran.stdout.splitlines() if "done:" in x][-4:])
    reported = common.run(ctx, report_argv, deadline.cap(30.0))
    summary = common.json_object(reported.stdout)
    if summary is None:
        io.error(f"rtk report failed: {reported.why()}")
        return
    found = figures.report_figures(summary)
    counted = step_figures(summary)
    io.measure("rtk_report", found)
    io.measure("steps", counted)
    if not found["energy_and_power_present"]:
        io.error("the report has no energy or no GPU power for the script's run")
    if counted["steps_found"] < steps(ctx) - 1:
        io.error(f"--auto-steps found {counted['steps_found']} steps; the script took {steps(ctx)}")
    energy, length = counted["median_step_energy_j"], counted["median_step_s"]
    io.summary(
        f"{counted['steps_found']} steps found of {steps(ctx)}; "
        + (f"{energy:.1f} J and " if energy is not None else "? J and ")
        + (f"{length * 1000:.0f} ms per step; " if length is not None else "? ms per step; ")
        + f"energy {found['energy_j'] or 0:.0f} J over {found['duration_s'] or 0:.1f} s"
    )
