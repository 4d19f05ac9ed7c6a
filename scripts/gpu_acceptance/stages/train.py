"""Stage 4: the built-in GPT at 125M in bf16, once per strategy, with telemetry.

Per strategy (ddp, fsdp2, DeepSpeed ZeRO-2, ZeRO-3, ZeRO-3 with the optimizer in CPU
memory): tokens/s and MFU (median of the steps after warm-up), peak GPU memory,
energy per token and the report's counter-against-power cross-check, in rtk's loop
without Ray, with rtk's sampler beside it. The same runs through Ray (``rtk train
--local``) are stage ray-train's.
"""

from __future__ import annotations

from typing import Any

from gpu_acceptance import training
from gpu_acceptance.context import STRATEGIES, StageContext


def per_run_timeout_s(ctx: StageContext, options: dict[str, Any]) -> float:
    """How long one strategy may take (DeepSpeed may compile its ops on first use)."""
    base = 150.0 if options["strategy"] == "deepspeed" else 90.0
    return base * (0.7 if ctx.quick else 1.0)


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    return (
        f"train the 125M GPT in bf16 for {ctx.train_steps} steps with rtk's trainer loop "
        "without Ray per strategy "
        f"({', '.join(ctx.strategies)}): tokens/s, MFU, peak memory, energy per token, report"
    )


def run(ctx: StageContext, io: Any) -> None:
    """Train once per strategy; each one's figures under ``strategies``."""
    if not ctx.has("torch"):
        raise io.skip("torch does not import")
    io.measure("path", "local loop")
    results: dict[str, dict[str, Any]] = {}
    for name in ctx.strategies:
        options = STRATEGIES[name]
        if options["strategy"] == "deepspeed" and not ctx.has("deepspeed"):
            results[name] = {
                "status": "skipped",
                "reason": "deepspeed does not import here (environment.imports says why)",
            }
            io.measure("strategies", results)
            continue
        timeout_s = per_run_timeout_s(ctx, options)
        figures = training.local_run(ctx, name, options, ctx.train_steps, timeout_s)
        figures["status"] = "failed" if "error" in figures else "ok"
        if "error" in figures:
            io.error(f"{name}: {figures['error'][:600]}")
        results[name] = figures
        io.measure("strategies", results)
    ran = [n for n, r in results.items() if r["status"] != "skipped"]
    if not ran:
        raise io.skip(
            "no strategy could run here: "
            + "; ".join(f"{n}: {r['reason']}" for n, r in results.items())
        )
    io.summary("; ".join(_line(name, r) for name, r in results.items()))


def _line(name: str, figures: dict[str, Any]) -> str:
    if figures["status"] == "skipped":
        return f"{name} skipped"
    if figures["status"] == "failed":
        return f"{name} failed"
    metrics = figures.get("metrics", {})
    report = figures.get("report", {})
    tokens = metrics.get("median_tokens_per_s")
    mfu = metrics.get("median_mfu")
    joules = report.get("energy_per_token_j")
    parts = [f"{tokens / 1000:.0f}k tok/s" if tokens else "? tok/s"]
    if mfu:
        parts.append(f"MFU {mfu:.2f}")
    if joules:
        parts.append(f"{joules * 1000:.2f} mJ/tok")
    if figures.get("peak_memory_allocated_gib"):
        parts.append(f"{figures['peak_memory_allocated_gib']:.1f} GiB")
    return f"{name} " + ", ".join(parts)
