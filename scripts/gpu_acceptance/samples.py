"""Reading the sampler's traces back: rates achieved, and per-GPU series for energy."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def read_samples(paths: Path | list[Path]) -> list[dict[str, Any]]:
    """Every sample of a trace (or traces), as the sensors wrote it; none if absent.

    A trace cut by a kill is read up to its last whole batch.
    """
    from toolkit.rundir.traces import read_table, row_dicts

    files = [p for p in ([paths] if isinstance(paths, Path) else paths) if p.exists()]
    return [row for batch in read_table(files).to_batches() for row in row_dicts(batch)]


def _rate(times: list[float]) -> float | None:
    if len(times) < 2 or times[-1] <= times[0]:
        return None
    return (len(times) - 1) / (times[-1] - times[0])


def achieved(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Rates the sampler reached, per GPU and over all GPUs (the slowest GPU).

    Full readings are ``kind: gpu`` rows; power readings are those plus the fast
    ``kind: gpu_power`` rows. Intervals are between consecutive power readings.
    """
    full: dict[str, list[float]] = {}
    power: dict[str, list[float]] = {}
    for row in rows:
        kind, device, wall_s = row.get("kind"), row.get("device"), row.get("wall_s")
        if kind not in ("gpu", "gpu_power") or not isinstance(wall_s, (int, float)):
            continue
        if kind == "gpu":
            full.setdefault(str(device), []).append(float(wall_s))
        if row.get("power_w") is not None:
            power.setdefault(str(device), []).append(float(wall_s))
    per_gpu = {}
    for device in sorted(set(full) | set(power)):
        times = sorted(power.get(device, []))
        gaps_ms = [(b - a) * 1e3 for a, b in zip(times, times[1:], strict=False)]
        per_gpu[device] = {
            "full_readings_per_s": _rate(sorted(full.get(device, []))),
            "power_readings_per_s": _rate(times),
            "interval_median_ms": statistics.median(gaps_ms) if gaps_ms else None,
            "interval_p99_ms": _percentile(gaps_ms, 0.99),
            "interval_max_ms": max(gaps_ms) if gaps_ms else None,
        }
    rates = [g["power_readings_per_s"] for g in per_gpu.values() if g["power_readings_per_s"]]
    fulls = [g["full_readings_per_s"] for g in per_gpu.values() if g["full_readings_per_s"]]
    return {
        "gpus": len(per_gpu),
        "power_readings_per_s": min(rates) if rates else None,
        "full_readings_per_s": min(fulls) if fulls else None,
        "per_gpu": per_gpu,
    }


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def series(
    rows: Iterable[dict[str, Any]], device: str, key: str
) -> tuple[list[float], list[float]]:
    """``(wall_s, value)`` of ``key`` in GPU rows of ``device``, in time order."""
    points = sorted(
        (float(r["wall_s"]), float(r[key]))
        for r in rows
        if r.get("device") == device
        and r.get("kind") in ("gpu", "gpu_power")
        and isinstance(r.get(key), (int, float))
        and isinstance(r.get("wall_s"), (int, float))
    )
    return [t for t, _ in points], [v for _, v in points]
