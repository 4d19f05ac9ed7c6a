"""Stage ray-train: ``rtk train --local`` per strategy, ``rtk report``, and the loop beside.

Per strategy (ddp, fsdp2, ZeRO-2, ZeRO-3, ZeRO-3 with the optimizer in CPU memory): the
125M GPT in bf16 at GPT-3's 6e-4 after 4 warm-up steps, telemetry on (NVML sampled by
a Ray actor at 50 Hz), then ``rtk report --json`` on its run directory: tokens/s and MFU
(medians after warm-up), the loss at the first and last step, the most GPU memory NVML
saw in use, J/token. Right after ddp through Ray, the same ddp run in the trainer's
loop without Ray (``gpu_acceptance.trainer``), and the ratio of the two tokens/s.
"""

from __future__ import annotations

from typing import Any

from gpu_acceptance import training
from gpu_acceptance.context import STRATEGIES, StageContext
from gpu_acceptance.stages.with_ray import common, figures

STEPS = 12  # per strategy (fewer with --train-steps)
LOOP = "ddp-loop"  # the run without Ray


def steps(ctx: StageContext) -> int:
    """Optimizer steps per run."""
    return min(ctx.train_steps, STEPS)


def run_timeout_s(ctx: StageContext, options: dict[str, Any]) -> float:
    """How long one run may take (DeepSpeed may build its ops on first use)."""
    base = 180.0 if options["strategy"] == "deepspeed" else 120.0
    return base * (0.8 if ctx.quick else 1.0)


def report_argv(ctx: StageContext, name: str) -> list[str]:
    """``rtk report RUN_DIR --json`` on one run."""
    return common.rtk(ctx, "report", str(training.ray_runs_dir(ctx) / name), "--json")


def commands(ctx: StageContext) -> list[list[str]]:
    """Per strategy ``rtk train`` and ``rtk report``; the ddp loop without Ray after ddp."""
    argvs = []
    for name in ctx.strategies:
        argvs.append(training.rtk_argv(ctx, name, STRATEGIES[name], steps(ctx)))
        argvs.append(report_argv(ctx, name))
        if name == "ddp":
            run_dir = ctx.work_dir / "runs" / LOOP
            config = training.train_config(run_dir, steps(ctx), STRATEGIES[name])
            result = run_dir / training.RESULT_FILE
            argvs.append(training.trainer_argv(ctx, config, result))
    return argvs


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    return (
        f"train the 125M GPT in bf16 for {steps(ctx)} steps with rtk train --local per strategy "
        f"({', '.join(ctx.strategies)}), telemetry on, rtk report on each; ddp also in the "
        "trainer's loop without Ray, and the ratio of their tokens/s (target >= "
        f"{figures.RATIO_TARGET})"
    )


def run(ctx: StageContext, io: Any) -> None:
    """Each strategy through Ray, the ddp loop without it, the ratio."""
    if not ctx.ray:
        raise io.skip(common.NO_RAY)
    deadline = common.Deadline(ctx.stage_timeout_s, reserve_s=5.0)
    results: dict[str, dict[str, Any]] = {}
    for name in ctx.strategies:
        options = STRATEGIES[name]
        if options["strategy"] == "deepspeed" and not ctx.has("deepspeed"):
            results[name] = {"status": "skipped", "reason": "deepspeed does not import"}
        elif deadline.left_s() < 30:
            results[name] = {"status": "skipped", "reason": "out of the stage's time"}
        else:
            results[name] = _train(ctx, io, name, options, deadline)
        io.measure("strategies", results)
        if name == "ddp" and deadline.left_s() >= 30:
            _against_the_loop(ctx, io, results[name], deadline)
    ran = [n for n, r in results.items() if r["status"] != "skipped"]
    if not ran:
        raise io.skip(
            "no strategy ran: " + "; ".join(f"{n}: {r['reason']}" for n, r in results.items())
        )
    ratio = io.result.measurements.get("ray_over_loop", {}).get("ratio")
    io.summary(
        "; ".join(_line(n, r) for n, r in results.items())
        + (f"; ddp Ray/loop {ratio:.3f}" if ratio else "")
    )


def _train(
    ctx: StageContext, io: Any, name: str, options: dict[str, Any], deadline: common.Deadline
) -> dict[str, Any]:
    run = training.ray_run(
        ctx, name, options, steps(ctx), deadline.cap(run_timeout_s(ctx, options))
    )
    report = common.run(ctx, report_argv(ctx, name), deadline.cap(60.0))
    summary = common.json_object(report.stdout)
    run["rtk_report"] = figures.report_figures(summary) if summary else {"error": report.why()}
    metrics = run["metrics"]
    first, last = metrics.get("first_loss"), metrics.get("last_loss")
    run["loss_went_down"] = isinstance(first, float) and isinstance(last, float) and last < first
    if "error" in run:
        io.error(f"{name}: {run['error'][:600]}")
    elif summary is None:
        io.error(f"{name}: rtk report failed: {report.why()}")
    elif not run["loss_went_down"]:
        io.error(f"{name}: the loss did not go down ({first} -> {last})")
    run["status"] = "failed" if "error" in run or summary is None else "ok"
    return run


def _against_the_loop(
    ctx: StageContext, io: Any, ray: dict[str, Any], deadline: common.Deadline
) -> None:
    loop = training.local_run(ctx, LOOP, STRATEGIES["ddp"], steps(ctx), deadline.cap(90.0))
    io.measure("ddp_loop", loop)
    if "error" in loop:
        io.error(f"ddp without Ray: {loop['error'][:600]}")
    ratio = figures.throughput_ratio(
        (ray.get("metrics") or {}).get("median_tokens_per_s"),
        loop["metrics"].get("median_tokens_per_s"),
        max(len(ctx.gpus), 1),
    )
    io.measure("ray_over_loop", ratio)
    if ratio["ratio"] is not None and not ratio["meets_target"]:
        findings = io.result.measurements.get("findings", [])
        io.measure(
            "findings",
            [
                *findings,
                f"ddp through Ray at {ratio['ratio']:.3f} of the loop's tokens/s "
                f"(target >= {figures.RATIO_TARGET})",
            ],
        )


def _line(name: str, run: dict[str, Any]) -> str:
    if run["status"] != "ok":
        return f"{name} {run['status']}"
    metrics, report = run["metrics"], run.get("rtk_report") or {}
    parts = []
    if metrics.get("median_tokens_per_s"):
        parts.append(f"{metrics['median_tokens_per_s'] / 1000:.0f}k tok/s")
    if metrics.get("median_mfu"):
        parts.append(f"MFU {metrics['median_mfu']:.2f}")
    if report.get("energy_per_token_j"):
        parts.append(f"{report['energy_per_token_j'] * 1000:.2f} mJ/tok")
    memory = run.get("peak_gpu_memory_used_gib_nvml") or {}
    if memory:
        parts.append(f"{max(memory.values()):.1f} GiB")
    if isinstance(metrics.get("first_loss"), float) and isinstance(metrics.get("last_loss"), float):
        parts.append(f"loss {metrics['first_loss']:.2f}->{metrics['last_loss']:.2f}")
    return f"{name} " + ", ".join(parts)
