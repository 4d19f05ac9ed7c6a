"""The kernels a ``torch.profiler`` run spent its time in, heaviest first.

``kernel_rows`` reads a profile's ``key_averages()`` (the events of one device kind);
``top_kernels`` ranks them (a pure function). The trainer without Ray uses both when
asked for its kernels (``python -m gpu_acceptance.trainer ... --kernels N``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def kernel_rows(events: Iterable[Any], device: str = "cuda") -> list[tuple[str, float, int]]:
    """``(name, self time in us, calls)`` of each event of ``device`` (``cuda`` or ``cpu``).

    On CUDA the time is the kernel's own device time (``self_device_time_total``,
    ``self_cuda_time_total`` in older torch); on the CPU the op's own CPU time.
    """
    rows = []
    for event in events:
        if device == "cuda":
            if not str(getattr(event, "device_type", "")).upper().endswith("CUDA"):
                continue
            us = getattr(event, "self_device_time_total", None)
            if us is None:
                us = getattr(event, "self_cuda_time_total", 0.0)
        else:
            us = getattr(event, "self_cpu_time_total", 0.0)
        if us and us > 0:
            rows.append((str(event.key), float(us), int(getattr(event, "count", 0))))
    return rows


def top_kernels(rows: Iterable[tuple[str, float, int]], n: int = 10) -> list[dict[str, Any]]:
    """The ``n`` kernels with the most time, each with its share of all kernels' time."""
    merged: dict[str, list[float]] = {}
    for name, us, calls in rows:
        entry = merged.setdefault(name, [0.0, 0])
        entry[0] += us
        entry[1] += calls
    total_us = sum(us for us, _ in merged.values())
    ranked = sorted(merged.items(), key=lambda kv: -kv[1][0])[:n]
    return [
        {
            "kernel": name if len(name) <= 120 else name[:117] + "...",
            "ms": round(us / 1e3, 3),
            "calls": int(calls),
            "share": round(us / total_us, 4) if total_us else None,
        }
        for name, (us, calls) in ranked
    ]
