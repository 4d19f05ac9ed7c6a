"""Stage 7: rtk's vLLM workload on a tiny local model, at two power limits.

The model is a two-layer Llama built from a config with random weights and a
word-level tokenizer (``tinymodel.py``): nothing is downloaded. With Ray, the sweep
runs as ``rtk profile`` (axes: the current power limit and a lower one). Without Ray,
each power limit is set with rtk's node script, ``python -m toolkit.profile.vllm_bench``
runs with the sampler beside it, the report is built, and the limit is put back.
Output tokens/s and joules per output token come from the report either way.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any

from gpu_acceptance import gpuctl, procs
from gpu_acceptance.context import StageContext
from gpu_acceptance.stages.power import plan
from gpu_acceptance.telemetry import LocalTelemetry, report_figures

BENCH = {"batch_size": 32, "input_len": 128, "output_len": 64}
BENCH_TIMEOUT_S = 150.0


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    how = "rtk profile" if ctx.ray else "toolkit.profile.vllm_bench with the sampler beside"
    return (
        f"build a tiny Llama from a config (random weights), run {how} at the current power"
        " limit and a lower one: output tokens/s and J per output token"
    )


def limits(before: dict[str, dict[str, Any]]) -> list[float]:
    """The two power limits: every GPU's current one (the lowest) and the lowered one."""
    current = [g.get("power_limit_w") for g in before.values()]
    lowered = plan(before)["power_limit_w"]
    if lowered is None or not current or any(c is None for c in current):
        return []
    return [float(min(c for c in current if c is not None)), float(lowered)]


def run(ctx: StageContext, io: Any) -> None:
    """Run the workload at each limit; its figures under ``runs``."""
    if not ctx.has("vllm"):
        raise io.skip(
            "vllm not installed (its wheel and its own torch are too large to bring to an "
            "offline machine; pip install 'rtk[vllm]' where the package registry answers)"
        )
    if not ctx.has("transformers"):
        raise io.skip("transformers does not import: the tiny model cannot be built")
    if os.geteuid() != 0:
        raise io.skip("needs root to set the power limits (as nvidia-smi -pl)")
    from gpu_acceptance.tinymodel import build_tiny_model

    model = build_tiny_model(ctx.work_dir / "tiny-llm")
    before = gpuctl.settings(ctx.python, Path(ctx.repo))
    watts = limits(before)
    io.measure("power_limits_w", watts)
    if len(watts) != 2:
        io.error("no power limit range from NVML: cannot pick two limits")
        return
    if ctx.ray:
        _with_profile(ctx, io, model, watts)
    else:
        io.measure(
            "findings",
            [
                "ray not installed: rtk profile needs a Ray head; ran toolkit.profile.vllm_bench"
                " at each power limit instead"
            ],
        )
        runs = {}
        for limit in watts:
            runs[f"{limit:g}W"] = _one_limit(ctx, io, model, limit, before)
            io.measure("runs", runs)
    figures = io.result.measurements.get("runs", {})
    io.summary(
        "; ".join(
            f"{k}: {(v.get('report') or {}).get('tokens_per_s') or 0:.0f} out tok/s, "
            f"{((v.get('report') or {}).get('energy_per_token_j') or 0) * 1000:.2f} mJ/tok"
            for k, v in figures.items()
        )
    )


def _one_limit(
    ctx: StageContext, io: Any, model: Path, limit: float, before: dict[str, Any]
) -> dict[str, Any]:
    repo = Path(ctx.repo)
    record: dict[str, Any] = {}
    current = min(g["power_limit_w"] for g in before.values())
    changed = abs(limit - current) > 1.0
    if changed:
        answer = gpuctl.control(ctx.python, repo, "apply", ctx.restore_file, power_limit_w=limit)
        if not answer.get("ok"):
            io.error(f"{limit:g} W: apply failed: {answer.get('error')}")
            return {"apply": answer}
    try:
        run_dir = ctx.work_dir / "runs" / f"vllm-{limit:g}W"
        shutil.rmtree(run_dir, ignore_errors=True)
        settings = {"model": str(model), **BENCH, "repeats": 3 if ctx.quick else 5}
        argv = [ctx.python, "-m", "toolkit.profile.vllm_bench", json.dumps(settings)]
        node = socket.gethostname()
        with LocalTelemetry(run_dir, node):
            done = procs.run(
                argv,
                BENCH_TIMEOUT_S,
                env=ctx.env(RTK_RUN_DIR=str(run_dir), RTK_NODE=node),
                cwd=ctx.repo,
            )
        record["rc"] = done.rc
        record["seconds"] = round(done.duration_s, 1)
        if not done.ok:
            io.error(f"vllm_bench at {limit:g} W: {done.why(1200)}")
            return record
        bench = json.loads((run_dir / "vllm.json").read_text(encoding="utf-8"))
        record["vllm_json"] = {k: bench.get(k) for k in ("tokens_per_s", "short_steps", "versions")}
        record["report"] = report_figures(run_dir)
    finally:
        if changed:
            record["restore"] = gpuctl.control(ctx.python, repo, "restore", ctx.restore_file)
            if not record["restore"].get("ok"):
                io.error(f"{limit:g} W: restore failed: {record['restore'].get('error')}")
    return record


def _with_profile(ctx: StageContext, io: Any, model: Path, watts: list[float]) -> None:
    """``rtk profile`` over the two limits; each configuration's figures under ``runs``."""
    folder = ctx.work_dir / "profile"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    gpus = max(len(ctx.gpus), 1)
    (folder / "local.yaml").write_text(
        "cluster: gpu-acceptance\ntransport: local\nnodes:\n"
        f"  - host: localhost\n    address: 127.0.0.1\n    gpus: {gpus}\n",
        encoding="utf-8",
    )
    sweep = {
        "name": "vllm-power",
        "inventory": "local.yaml",
        "output_dir": str(folder / "out"),
        "workload": {"vllm": {"model": str(model), **BENCH}},
        "axes": {"power_limit_w": watts},
        "repeats": 1,
        "baseline_s": 5,
        "cooldown_max_s": 20,
    }
    (folder / "sweep.json").write_text(json.dumps(sweep), encoding="utf-8")
    # JSON is YAML: the sweep file is read as YAML.
    shutil.copy(folder / "sweep.json", folder / "vllm-power.yaml")
    done = procs.run(
        [ctx.python, "-m", "toolkit", "profile", str(folder / "vllm-power.yaml")],
        220,
        env=ctx.env(),
        cwd=ctx.repo,
    )
    io.measure(
        "rtk_profile",
        {
            "rc": done.rc,
            "seconds": round(done.duration_s, 1),
            "tail": procs.tail(done.stdout, 1500),
        },
    )
    found = sorted((folder / "out").rglob("results.json"))
    if not found:
        io.error(f"rtk profile wrote no results.json: {done.why()}")
        return
    results = json.loads(found[0].read_text(encoding="utf-8"))
    runs = {}
    for config in results.get("configurations", []):
        key = f"{config.get('axes', {}).get('power_limit_w')}W"
        runs[key] = {
            "report": {
                "tokens_per_s": (config.get("tokens_per_s") or {}).get("mean"),
                "energy_per_token_j": (config.get("energy_per_token_j") or {}).get("mean"),
            },
            "repeats_ok": config.get("repeats_ok"),
        }
    io.measure("runs", runs)
    if not done.ok:
        io.error(f"rtk profile: {done.why()}")
