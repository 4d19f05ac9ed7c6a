"""What the Ray stages read from rtk's outputs: pure functions of the JSON and text.

Each takes what a command printed or a file holds, in the shape rtk writes it
(``rtk status --json``: ``ClusterStatus.to_json``; ``rtk preflight --json``:
``PreflightRecord.to_json``; ``rtk report --json``: ``summary_dict``; ``metrics.jsonl``:
``MetricsLine``; ``control.py read``: per GPU UUID; a sweep's ``runs.csv``), and
returns the figures the acceptance records.
"""

from __future__ import annotations

import csv
import io
import re
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

RATIO_TARGET = 0.95  # the Ray path's tokens/s over the loop's, ddp
MFU_TARGET = 0.40  # DDP 350M bf16 compiled
LIMIT_SHARES = (0.8, 0.6)  # rtk profile's two power limits, as shares of the default
LIMIT_TOLERANCE_W = 1.0

_GPU_LINE = re.compile(r"^\s*([\d.]+)/([\d.]+) GPU\b", re.M)
_TFLOPS = re.compile(r"(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))? TFLOP/s")


def status_gpus(status: Mapping[str, Any]) -> dict[str, Any]:
    """``rtk status --json``: the nodes alive and the GPUs Ray registered on them."""
    nodes = [n for n in status.get("nodes") or [] if isinstance(n, dict)]
    alive = [n for n in nodes if n.get("alive")]
    per_node = {
        str(n.get("name")): float((n.get("resources") or {}).get("GPU", 0.0)) for n in alive
    }
    return {
        "nodes": len(nodes),
        "alive": [str(n.get("name")) for n in alive],
        "gpus": sum(per_node.values()),
        "gpus_per_node": per_node,
        "problems": [f"{n.get('name')}: {n['problem']}" for n in nodes if n.get("problem")],
        "ray_version": status.get("ray_version"),
        "error": status.get("error"),
    }


def ray_status_gpus(text: str) -> float | None:
    """The GPUs ``ray status`` lists as the cluster's total (``0.0/1.0 GPU``); None if none."""
    match = _GPU_LINE.search(text)
    return float(match.group(2)) if match else None


def gemm_tflops(measured: str) -> list[float]:
    """The TFLOP/s figures in a ``load.gemm`` check's text (a range gives both ends)."""
    found: list[float] = []
    for low, high in _TFLOPS.findall(measured):
        found.append(float(low))
        if high:
            found.append(float(high))
    return found


def preflight_figures(record: Mapping[str, Any]) -> dict[str, Any]:
    """``rtk preflight --json``: every check's outcome, the counts and the GEMM rate."""
    checks = [c for c in record.get("checks") or [] if isinstance(c, dict)]
    counts = {s: sum(1 for c in checks if c.get("status") == s) for s in ("pass", "warn", "fail")}
    gemm = [x for c in checks if c.get("name") == "load.gemm" for x in gemm_tflops(c["measured"])]
    return {
        "status": record.get("status"),
        "counts": counts,
        "checks": {
            f"{c.get('name')}@{c.get('scope')}": f"{c.get('status')}: {c.get('measured')}"
            for c in checks
        },
        "failed": [
            f"{c.get('name')} on {c.get('scope')}: {c.get('measured')}"
            for c in checks
            if c.get("status") == "fail"
        ],
        "gemm_tflops": gemm,
        "load_ran": any(str(c.get("name", "")).startswith("load.") for c in checks),
    }


def throughput_ratio(
    ray_tokens_per_s: Any, loop_tokens_per_s: Any, workers: int = 1
) -> dict[str, Any]:
    """The Ray path's tokens/s per worker over the loop's (one GPU), against ``RATIO_TARGET``."""
    ratio = None
    numbers = all(isinstance(x, (int, float)) for x in (ray_tokens_per_s, loop_tokens_per_s))
    if numbers and loop_tokens_per_s > 0 and workers > 0:
        ratio = ray_tokens_per_s / workers / loop_tokens_per_s
    return {
        "ray_tokens_per_s": ray_tokens_per_s,
        "ray_workers": workers,
        "loop_tokens_per_s": loop_tokens_per_s,
        "ratio": ratio,
        "target": RATIO_TARGET,
        "meets_target": ratio is not None and ratio >= RATIO_TARGET,
    }


def compiled_figures(lines: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A compiled run's ``metrics.jsonl``: compile time apart, the rest's speed and MFU.

    Steps with ``compile_s`` compiled (their time is mostly compiling): their seconds
    add up to ``compile_s`` and they are left out of the rates, as ``TrainThroughput``
    does. MFU is weighted by step time (so it agrees with the tokens/s), and its median
    is given beside.
    """
    rows = [dict(x) for x in lines]
    compiling = [r for r in rows if isinstance(r.get("compile_s"), (int, float))]
    steady = [r for r in rows if not isinstance(r.get("compile_s"), (int, float))]
    time_s = sum(float(r.get("step_time_s") or 0.0) for r in steady)
    tokens = sum(int(r.get("tokens") or 0) for r in steady)
    mfus = [
        (float(r["mfu"]), float(r.get("step_time_s") or 0.0))
        for r in steady
        if isinstance(r.get("mfu"), (int, float))
    ]
    mfu = sum(m * t for m, t in mfus) / time_s if mfus and time_s > 0 else None
    return {
        "steps": len(rows),
        "compile_s": sum(float(r["compile_s"]) for r in compiling) if compiling else None,
        "compile_steps": len(compiling),
        "compile_step_time_s": sum(float(r.get("step_time_s") or 0.0) for r in compiling),
        "steady_steps": len(steady),
        "tokens_per_s": tokens / time_s if time_s > 0 else None,
        "mfu": mfu,
        "median_mfu": statistics.median(m for m, _ in mfus) if mfus else None,
        "mfu_target": MFU_TARGET,
        "meets_target": mfu is not None and mfu >= MFU_TARGET,
        "first_loss": rows[0].get("loss") if rows else None,
        "last_loss": rows[-1].get("loss") if rows else None,
    }


def report_figures(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``rtk report --json``: tokens/s, energy, J/token, and each GPU's power and energy."""
    run = summary.get("run") or {}
    gpus: dict[str, dict[str, Any]] = {}
    for node in (summary.get("nodes") or {}).values():
        for name, device in (node.get("devices") or {}).items():
            if device.get("kind") == "gpu":
                gpus[name] = {
                    "energy_j": device.get("energy_j"),
                    "energy_source": device.get("energy_source"),
                    "avg_power_w": device.get("avg_power_w"),
                    "peak_power_w": device.get("peak_power_w"),
                }
    checks = (summary.get("cross_check") or {}).get("devices") or []
    energy = run.get("energy_j")
    powers = [g["avg_power_w"] for g in gpus.values() if isinstance(g["avg_power_w"], (int, float))]
    return {
        "tokens_per_s": run.get("tokens_per_s"),
        "energy_j": energy,
        "energy_per_token_j": run.get("energy_per_token_j"),
        "steps": run.get("steps"),
        "duration_s": run.get("duration_s"),
        "gpus": gpus,
        "power_over_counter": {c.get("device"): c.get("ratio") for c in checks},
        "energy_and_power_present": isinstance(energy, (int, float))
        and energy > 0
        and any(p > 0 for p in powers),
    }


def peak_memory_gib(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Per GPU, the most device memory NVML saw in use during a run (GiB)."""
    peak: dict[str, float] = {}
    for row in rows:
        used = row.get("memory_used_bytes")
        if row.get("kind") == "gpu" and isinstance(used, (int, float)):
            device = str(row.get("device"))
            peak[device] = max(peak.get(device, 0.0), used / 2**30)
    return peak


def profile_limits(settings: Mapping[str, Mapping[str, Any]]) -> list[float] | None:
    """Two power limits every GPU takes (``LIMIT_SHARES`` of the lowest default), high first.

    ``settings`` is ``control.py read``'s answer per GPU UUID. None when a GPU gives no
    default or minimum, or when both shares land on the same limit.
    """
    defaults = [g.get("default_power_limit_w") for g in settings.values()]
    minima = [g.get("power_limit_min_w") for g in settings.values()]
    if not settings or not all(isinstance(v, (int, float)) for v in [*defaults, *minima]):
        return None
    low, floor = min(defaults), max(minima)  # type: ignore[type-var]
    limits = [float(round(max(low * share, floor))) for share in LIMIT_SHARES]
    return limits if limits[0] != limits[1] else None


def restore_check(
    before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Whether every GPU's power limit is back where it was (and at its default).

    Both are ``control.py read``'s answer per GPU UUID, before the sweep and after it.
    """
    per_gpu: dict[str, Any] = {}
    problems: list[str] = []
    for uuid, was in before.items():
        now = (after.get(uuid) or {}).get("power_limit_w")
        wanted, default = was.get("power_limit_w"), was.get("default_power_limit_w")
        back = _close(now, wanted)
        per_gpu[uuid] = {
            "before_w": wanted,
            "after_w": now,
            "default_w": default,
            "restored": back,
            "at_default": _close(now, default),
        }
        if not back:
            problems.append(f"{uuid}: power limit {now} W after rtk profile, {wanted} W before")
    return {"per_gpu": per_gpu, "problems": problems, "restored": not problems and bool(before)}


def _close(a: Any, b: Any) -> bool:
    numbers = isinstance(a, (int, float)) and isinstance(b, (int, float))
    return numbers and abs(a - b) <= LIMIT_TOLERANCE_W


def sweep_runs(runs_csv: str) -> list[dict[str, Any]]:
    """A sweep's ``runs.csv``: per run its power limit, outcome and figures."""
    keys = (
        "power_limit_w",
        "run_id",
        "status",
        "error",
        "time_s",
        "energy_j",
        "tokens_per_s",
        "energy_per_token_j",
        "avg_power_w",
    )
    runs = []
    for row in csv.DictReader(io.StringIO(runs_csv)):
        runs.append({k: _number(row.get(k)) for k in keys})
    return runs


def _number(text: str | None) -> Any:
    if text is None or text == "":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def ray_processes(pgrep_output: str) -> list[str]:
    """``pgrep -a`` lines (``PID COMMAND...``) of the Ray daemons still running."""
    return [line.strip() for line in pgrep_output.splitlines() if line.strip()]


POWER_SAVING_TARGET = 0.10  # --power-policy optimize: energy per step saved, at least
POWER_SLOWDOWN_TARGET = 0.05  # ... at no more than this longer a step


def power_policy_figures(
    measured: list[Mapping[str, Any]],
    optimized: list[Mapping[str, Any]],
    power_lines: list[Mapping[str, Any]],
) -> dict[str, Any]:
    """Energy and time per step, default limit against optimize, once optimize settled.

    ``measured`` and ``optimized`` are the two runs' ``summary.json`` ``steps.per_step``;
    ``power_lines`` the optimize run's ``power.jsonl``. The steps compared are those
    from the first settled window's first step on, complete in both runs; medians.
    """
    problems: list[str] = []
    decisions = [p for p in power_lines if p.get("kind") == "decision"]
    windows = [p for p in power_lines if p.get("kind") == "window"]
    chosen = next((d for d in decisions if d.get("settled")), None)
    settled_from = None
    if chosen is not None:
        index = decisions.index(chosen)  # the window after decision i is window i
        if index < len(windows):
            settled_from = int(windows[index]["first_step"])
    if chosen is None or settled_from is None:
        problems.append("optimize never settled on a limit (power.jsonl): too few steps?")

    def stretch(rows: list[Mapping[str, Any]]) -> dict[int, tuple[float, float]]:
        return {
            int(r["step"]): (float(r["energy_j"]), float(r["duration_s"]))
            for r in rows
            if r.get("complete")
            and r.get("energy_j") is not None
            and settled_from is not None
            and int(r["step"]) >= settled_from
        }

    base, opt = stretch(measured), stretch(optimized)
    common_steps = sorted(set(base) & set(opt))
    figures: dict[str, Any] = {
        "settled_from_step": settled_from,
        "chosen": chosen.get("reason") if chosen else None,
        "steps_compared": len(common_steps),
        "problems": problems,
    }
    if len(common_steps) < 10:
        if chosen is not None:
            problems.append(f"only {len(common_steps)} settled steps to compare (want 10+)")
        return figures
    base_j = statistics.median(base[s][0] for s in common_steps)
    opt_j = statistics.median(opt[s][0] for s in common_steps)
    base_s = statistics.median(base[s][1] for s in common_steps)
    opt_s = statistics.median(opt[s][1] for s in common_steps)
    saved, slower = 1 - opt_j / base_j, opt_s / base_s - 1
    figures |= {
        "default_j_per_step": base_j,
        "optimize_j_per_step": opt_j,
        "default_s_per_step": base_s,
        "optimize_s_per_step": opt_s,
        "energy_saved": saved,
        "slowdown": slower,
        "meets_target": saved >= POWER_SAVING_TARGET and slower <= POWER_SLOWDOWN_TARGET,
    }
    return figures


def power_policy_summary(compared: Mapping[str, Any], check: Mapping[str, Any]) -> str:
    """The stage's line."""
    back = "limits restored" if check.get("restored") else "limits NOT restored"
    if "energy_saved" not in compared:
        return f"no comparison ({'; '.join(compared['problems']) or 'no steps'}); {back}"
    return (
        f"{compared['energy_saved']:.1%} less energy per step, {compared['slowdown']:+.1%} "
        f"time per step over {compared['steps_compared']} settled steps "
        f"(target >= {POWER_SAVING_TARGET:.0%} at <= {POWER_SLOWDOWN_TARGET:.0%}); "
        f"{compared['chosen']}; {back}"
    )
