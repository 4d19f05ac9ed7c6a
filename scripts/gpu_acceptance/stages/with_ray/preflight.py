"""Stage ray-preflight: ``rtk preflight --local --load`` through Ray.

Every check of this node (host, software, GPUs through NVML, Ray's ports) and, as a
Ray job, the load test: a GEMM on each GPU with clocks and throttle reasons read
during it, host-device copies, the node's own all-reduce. Each check's outcome is
recorded; the GEMM rate is read from the ``load.gemm`` check.
"""

from __future__ import annotations

from typing import Any

from gpu_acceptance.context import StageContext
from gpu_acceptance.stages.with_ray import common, figures


def load_seconds(ctx: StageContext) -> float:
    """How long the GEMM runs."""
    return 2.0 if ctx.quick else 4.0


def commands(ctx: StageContext) -> list[list[str]]:
    """The one command."""
    seconds = f"{load_seconds(ctx):g}"
    return [common.rtk(ctx, "preflight", "--local", "--load", "--load-seconds", seconds, "--json")]


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    return (
        f"run rtk preflight --local --load ({load_seconds(ctx):g} s of bf16 GEMM per GPU as a "
        "Ray job) and record every check's outcome and the GEMM rate"
    )


def run(ctx: StageContext, io: Any) -> None:
    """Preflight with its load test; each check, the GEMM figure."""
    if not ctx.ray:
        raise io.skip(common.NO_RAY)
    (argv,) = commands(ctx)
    done = common.run(ctx, argv, common.Deadline(ctx.stage_timeout_s, 5.0).cap(110.0))
    io.measure("rtk_preflight", common.outcome(done))
    record = common.json_object(done.stdout)
    if record is None:
        io.error(f"rtk preflight printed no JSON: {done.why()}")
        return
    found = figures.preflight_figures(record)
    io.measure("preflight", found)
    for failed in found["failed"]:
        io.error(f"preflight check failed: {failed}")
    if not found["load_ran"]:
        io.error("no load.* check: the load test did not run")
    elif not found["gemm_tflops"]:
        io.error("no GEMM rate in the load.gemm check")
    counts = found["counts"]
    gemm = found["gemm_tflops"]
    io.summary(
        f"{sum(counts.values())} checks ({counts['pass']} pass, {counts['warn']} warn, "
        f"{counts['fail']} fail); GEMM " + (f"{min(gemm):.0f} TFLOP/s" if gemm else "not measured")
    )
