"""Stage 5: power limit and locked clocks through rtk's node script, then put back.

For the GPUs' own settings, then a lowered power limit, then locked SM clocks: set
(``toolkit/node/gpu_control.py apply``, as rtk feeds it to a node), check through NVML
(``read``) and ``nvidia-smi -q -d POWER,CLOCK``, train briefly (ddp, 125M, bf16) with
the sampler beside, put back (``restore``) and check again. Last, a run that dies: the
limit is set, training starts and is killed mid-run; the settings outlive it, and the
restore file alone puts them back (what ``rtk profile --restore`` does after a crash).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpu_acceptance import gpuctl, procs, smi, training
from gpu_acceptance.context import StageContext
from gpu_acceptance.samples import read_samples, series
from toolkit.rundir import RunDir

LIMIT_SHARE = 0.6  # the lowered power limit, as a share of the current one
CLOCK_SHARE = 0.6  # the locked SM clock, as a share of the maximum
CLOCK_STEP_MHZ = 15
TOLERANCE_W = 1.0


def plan(before: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The settings to try, from every GPU's limits: one power limit, one SM clock lock.

    The power limit is ``LIMIT_SHARE`` of the lowest current limit, never below any
    GPU's minimum; the clock is ``CLOCK_SHARE`` of the lowest maximum SM clock, on a
    15 MHz step. A setting no GPU can take is left out (None).
    """
    limits = _numbers(g.get("power_limit_w") for g in before.values())
    minima = _numbers(g.get("power_limit_min_w") for g in before.values())
    maxima_mhz = _numbers(g.get("max_sm_clock_mhz") for g in before.values())
    power_w = None
    if limits and len(limits) == len(minima) == len(before):
        power_w = float(round(max(min(limits) * LIMIT_SHARE, max(minima))))
    clock = None
    if maxima_mhz and len(maxima_mhz) == len(before):
        mhz = int(min(maxima_mhz) * CLOCK_SHARE) // CLOCK_STEP_MHZ * CLOCK_STEP_MHZ
        clock = (mhz, mhz)
    return {"power_limit_w": power_w, "gpu_clocks_mhz": clock}


def _numbers(values: Iterable[Any]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float))]


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    return (
        "as root: lower the power limit, then lock the SM clocks, with toolkit/node/gpu_control.py;"
        " check with NVML and nvidia-smi -q -d POWER,CLOCK; train briefly at each; restore and"
        " check; then kill a run mid-way and restore from the restore file"
    )


def _smi_q() -> dict[str, Any] | None:
    if not smi.available():
        return None
    try:
        return smi.power_and_clocks(smi.parse_q(smi.q_text("POWER,CLOCK")))
    except RuntimeError as e:
        return {"error": str(e)}


def _limits_now(ctx: StageContext) -> dict[str, float | None]:
    return {
        u: g.get("power_limit_w") for u, g in gpuctl.settings(ctx.python, Path(ctx.repo)).items()
    }


def _observed(run_dir: Path) -> dict[str, Any]:
    """Median and peak power, peak SM clock and the clocks-event bits seen while training."""
    rows = read_samples(RunDir(run_dir).node_traces(socket.gethostname()))
    found: dict[str, Any] = {}
    for device in sorted({str(r.get("device")) for r in rows if r.get("kind") == "gpu"}):
        _, power = series(rows, device, "power_w")
        _, clock = series(rows, device, "sm_clock_mhz")
        _, reasons = series(rows, device, "clocks_event_reasons")
        busy = sorted(power)[len(power) // 2 :]  # the busier half: training, not start-up
        mask = 0
        for r in reasons:
            mask |= int(r)
        found[device] = {
            "median_power_w_busy_half": busy[len(busy) // 2] if busy else None,
            "max_power_w": max(power) if power else None,
            "max_sm_clock_mhz": max(clock) if clock else None,
            "clocks_event_reasons_seen": hex(mask),
        }
    return found


def _train(ctx: StageContext, label: str) -> dict[str, Any]:
    steps = 10 if ctx.quick else 20
    figures = training.local_run(ctx, f"power-{label}", {"strategy": "ddp"}, steps, 90)
    figures["observed"] = _observed(ctx.work_dir / "runs" / f"power-{label}")
    return figures


def run(ctx: StageContext, io: Any) -> None:
    """Set, check, train, restore, check; then the killed run."""
    if os.geteuid() != 0:
        raise io.skip(
            "needs root: setting a power limit or locking clocks does (as nvidia-smi -pl)"
        )
    if not ctx.has("pynvml"):
        raise io.skip("pynvml (nvidia-ml-py) does not import")
    repo = Path(ctx.repo)
    before = gpuctl.settings(ctx.python, repo)
    io.measure("before", {"nvml": before, "nvidia_smi": _smi_q()})
    settings = plan(before)
    io.measure("plan", settings)
    findings: list[str] = []
    runs: dict[str, Any] = {"default": _train(ctx, "default")}
    io.measure("runs", runs)
    for key, value in settings.items():
        if value is None:
            io.error(f"{key}: no value every GPU accepts (NVML gave no range)")
            continue
        runs[key] = _set_train_restore(ctx, io, key, value, before, findings)
        io.measure("runs", runs)
    if settings["power_limit_w"] is not None:
        io.measure("killed_run", _killed_run(ctx, io, settings["power_limit_w"], before))
    io.measure("findings", findings)
    io.summary(_summary(runs, settings))


def _set_train_restore(
    ctx: StageContext, io: Any, key: str, value: Any, before: dict[str, Any], findings: list[str]
) -> dict[str, Any]:
    repo = Path(ctx.repo)
    record: dict[str, Any] = {"value": value}
    answer = gpuctl.control(ctx.python, repo, "apply", ctx.restore_file, **{key: value})
    record["apply"] = answer
    if not answer.get("ok"):
        io.error(f"{key}={value}: apply failed: {answer.get('error')}")
        return record
    try:
        record["during"] = {"nvml": gpuctl.settings(ctx.python, repo), "nvidia_smi": _smi_q()}
        if key == "power_limit_w":
            for uuid, got in _limits_now(ctx).items():
                if got is None or abs(got - value) > TOLERANCE_W:
                    io.error(f"{uuid}: NVML says the power limit is {got} W, {value} W was set")
            for bus, gpu in (record["during"]["nvidia_smi"] or {}).items():
                got = gpu.get("power_limit_w") if isinstance(gpu, dict) else None
                if got is None or abs(got - value) > TOLERANCE_W:
                    io.error(
                        f"{bus}: nvidia-smi says the power limit is {got} W, {value} W was set"
                    )
        record["train"] = _train(ctx, key)
        for device, seen in record["train"]["observed"].items():
            if key == "power_limit_w" and (seen["median_power_w_busy_half"] or 0) > value * 1.05:
                findings.append(
                    f"{device}: {seen['median_power_w_busy_half']:.0f} W under a {value:g} W limit"
                )
            if key == "gpu_clocks_mhz" and (seen["max_sm_clock_mhz"] or 0) > value[1] + 2 * 15:
                reached = seen["max_sm_clock_mhz"]
                findings.append(f"{device}: SM clock reached {reached} MHz, locked at {value[1]}")
    finally:
        record["restore"] = gpuctl.control(ctx.python, repo, "restore", ctx.restore_file)
    record["after"] = _check_restored(ctx, io, before, key)
    return record


def _check_restored(
    ctx: StageContext, io: Any, before: dict[str, Any], what: str
) -> dict[str, Any]:
    after = _limits_now(ctx)
    for uuid, limit in after.items():
        wanted = before.get(uuid, {}).get("power_limit_w")
        if wanted is None or limit is None or abs(limit - wanted) > TOLERANCE_W:
            io.error(f"{uuid}: after {what}, the power limit is {limit} W, was {wanted} W")
    if ctx.restore_file.exists():
        io.error(f"after {what}: the restore file is still there ({ctx.restore_file.name})")
    return {
        "power_limit_w": after,
        "nvidia_smi": _smi_q(),
        "restore_file_left": ctx.restore_file.exists(),
    }


def _killed_run(
    ctx: StageContext, io: Any, power_w: float, before: dict[str, Any]
) -> dict[str, Any]:
    """Set the limit, start training, kill it mid-run; the restore file puts it back."""
    repo = Path(ctx.repo)
    record: dict[str, Any] = {"power_limit_w": power_w}
    answer = gpuctl.control(ctx.python, repo, "apply", ctx.restore_file, power_limit_w=power_w)
    record["apply_ok"] = bool(answer.get("ok"))
    if not answer.get("ok"):
        io.error(f"killed run: apply failed: {answer.get('error')}")
        return record
    run_dir = ctx.work_dir / "runs" / "power-killed"
    config = training.train_config(run_dir, 1000, {"strategy": "ddp"})
    trainer = procs.Background(
        training.trainer_argv(ctx, config, run_dir / "never-written.json"),
        env=ctx.env(),
        cwd=ctx.repo,
    )
    try:
        record["step_seen_before_kill"] = (trainer.wait_for("step ", 120) or "").strip()
        trainer.proc.kill()  # SIGKILL: no handler, no finally, as a crash
        trainer.proc.wait(30)
        record["trainer_exit"] = trainer.proc.returncode
        time.sleep(1.0)
        record["limit_after_kill"] = _limits_now(ctx)
    finally:
        trainer.stop()
        record["restore"] = gpuctl.control(ctx.python, repo, "restore", ctx.restore_file)
    record["after"] = _check_restored(ctx, io, before, "the killed run")
    if not record["step_seen_before_kill"]:
        io.error("killed run: training printed no step before the kill")
    return record


def _summary(runs: dict[str, Any], settings: dict[str, Any]) -> str:
    parts = []
    for key, run in runs.items():
        train = run if key == "default" else run.get("train", {})
        tokens = (train.get("metrics") or {}).get("median_tokens_per_s")
        watts = [o.get("median_power_w_busy_half") for o in (train.get("observed") or {}).values()]
        label = key if key == "default" else f"{key}={settings[key]}"
        text = f"{label}: {tokens / 1000:.0f}k tok/s" if tokens else f"{label}: no training"
        if watts and watts[0]:
            text += f" at {watts[0]:.0f} W"
        parts.append(text)
    return "; ".join(parts) + "; restored after each and after a killed run"
