"""Stage ray-record: ``rtk telemetry record`` around a plain PyTorch script, then its report.

The script (``gpu_acceptance/plain_torch.py``: an MLP on the GPU that imports nothing
of rtk) is copied into a folder of its own, shipped as the job's working directory,
and run as a Ray job while a sampler per node records; ``rtk report --json`` on the
run directory must then give its energy and each GPU's power.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpu_acceptance import training
from gpu_acceptance.context import StageContext
from gpu_acceptance.stages.with_ray import common, figures

SCRIPT = common.PLAIN_TORCH
RUN_ID = "plain-torch"


def seconds(ctx: StageContext) -> float:
    """How long the script trains."""
    return 10.0 if ctx.quick else 20.0


def job_dir(ctx: StageContext) -> Path:
    """The working directory shipped with the job: the script alone."""
    return ctx.work_dir / "record-job"


def commands(ctx: StageContext) -> list[list[str]]:
    """``rtk telemetry record ... -- python plain_torch.py``, then ``rtk report``."""
    record = common.rtk(ctx, "telemetry", "record", "--local", "--working-dir", str(job_dir(ctx)))
    record += ["--output-dir", str(training.ray_runs_dir(ctx)), "--run-id", RUN_ID]
    record += [
        "--power-rate-hz",
        "50",
        "--",
        "python",
        SCRIPT.name,
        "--seconds",
        f"{seconds(ctx):g}",
    ]
    run_dir = str(training.ray_runs_dir(ctx) / RUN_ID)
    return [record, common.rtk(ctx, "report", run_dir, "--json")]


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    return (
        f"run a plain PyTorch MLP script ({seconds(ctx):g} s on the GPU, nothing of rtk "
        "imported) under rtk telemetry record --local, then rtk report: energy and power"
    )


def run(ctx: StageContext, io: Any) -> None:
    """Record the script, report it."""
    if not ctx.ray:
        raise io.skip(common.NO_RAY)
    record_argv, report_argv = commands(ctx)
    common.fresh_job(job_dir(ctx), SCRIPT, training.ray_runs_dir(ctx) / RUN_ID)
    deadline = common.Deadline(ctx.stage_timeout_s, reserve_s=5.0)
    recorded = common.run(ctx, record_argv, deadline.cap(deadline.left_s() - 30.0))
    io.measure("rtk_telemetry_record", common.outcome(recorded))
    if not recorded.ok:
        io.error(f"rtk telemetry record failed: {recorded.why()}")
    io.measure("script_said", [x for x in recorded.stdout.splitlines() if x.startswith("done:")])
    reported = common.run(ctx, report_argv, deadline.cap(60.0))
    summary = common.json_object(reported.stdout)
    if summary is None:
        io.error(f"rtk report failed: {reported.why()}")
        return
    found = figures.report_figures(summary)
    io.measure("rtk_report", found)
    if not found["energy_and_power_present"]:
        io.error("the report has no energy or no GPU power for the script's run")
    watts = [g["avg_power_w"] for g in found["gpus"].values() if g["avg_power_w"]]
    io.summary(
        f"energy {found['energy_j'] or 0:.0f} J over {found['duration_s'] or 0:.1f} s; GPU power "
        + (", ".join(f"{w:.0f} W" for w in watts) if watts else "missing")
    )
