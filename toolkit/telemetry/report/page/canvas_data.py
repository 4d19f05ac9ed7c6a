"""The data report.html embeds for its canvas: the grid, quantised, as base64 in JSON.

A reading's buckets are stored as unsigned integers over its range (``lo`` to ``hi``):
two bytes for power and clocks (1/65534 of the range), one byte for temperature,
utilisation and the throttled share (1/254 of it); the largest value of each width
means "no sample". 512 GPUs by 1,000 buckets by five readings is about 5 MB of page;
the page decodes a reading when it is first shown.
"""

from __future__ import annotations

import base64
import json

import numpy as np

from toolkit.json_types import JsonObject, JsonValue
from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.grid import Grid, device_grid, node_power
from toolkit.telemetry.report.inputs.series import FloatArray
from toolkit.telemetry.report.terminal import short_device

# Bytes per value, per reading (others: 2).
ONE_BYTE = {"temperature_c", "throttled", "gpu_util_pct", "cpu_util_pct"}
FIXED_RANGE = {"throttled": (0.0, 1.0), "gpu_util_pct": (0.0, 100.0), "cpu_util_pct": (0.0, 100.0)}


def encode(values: FloatArray, lo: float, hi: float, width: int) -> str:
    """``values`` (NaN: no sample) as ``width``-byte little-endian integers, base64."""
    top = (1 << (8 * width)) - 1
    span = hi - lo if hi > lo else 1.0
    scaled = np.clip(np.rint((values - lo) / span * (top - 1)), 0, top - 1)
    scaled = np.where(np.isnan(values), top, scaled)
    dtype = "<u2" if width == 2 else "u1"
    return base64.b64encode(scaled.astype(dtype).tobytes()).decode("ascii")


def decode(text: str, lo: float, hi: float, width: int) -> FloatArray:
    """What the page computes from ``encode``'s text (NaN: no sample)."""
    top = (1 << (8 * width)) - 1
    raw = np.frombuffer(base64.b64decode(text), dtype="<u2" if width == 2 else "u1")
    span = hi - lo if hi > lo else 1.0
    values: FloatArray = np.where(
        raw == top, np.nan, lo + raw.astype(np.float64) / (top - 1) * span
    )
    return values


def _packed(name: str, label: str, values: FloatArray) -> JsonObject:
    lo, hi = FIXED_RANGE.get(name, (None, None))
    known = values[~np.isnan(values)]
    if lo is None or hi is None:
        lo = float(known.min()) if known.size else 0.0
        hi = float(known.max()) if known.size else 1.0
    width = 1 if name in ONE_BYTE else 2
    return {
        "name": name,
        "label": label,
        "lo": lo,
        "hi": hi,
        "bytes": width,
        "data": encode(values, lo, hi, width),
    }


def page_data(report: Report, grid: Grid | None = None) -> JsonObject:
    """Everything the page's canvases draw: the JSON embedded in the page."""
    grid = grid if grid is not None else device_grid(report)
    buckets = grid.buckets
    node_index = {name: i for i, (name, _, _) in enumerate(grid.nodes)}
    names, totals = node_power(report)
    data: JsonObject = {
        "kind": grid.kind,
        "duration_s": report.window.duration_s,
        "head": report.timeline.head,
        "buckets": 0 if buckets is None else buckets.count,
        "bucket_s": 0.0 if buckets is None else buckets.width_s,
        "nodes": [name for name, _, _ in grid.nodes],
        "node_rows": [[first, count] for _, first, count in grid.nodes],
        "devices": [short_device(device) for _, device in grid.rows],
        "row_node": [node_index[node] for node, _ in grid.rows],
        "layers": [
            _packed(layer.name, layer.label, grid.values[layer.name]) for layer in grid.layers
        ],
        "barriers": [report.relative_s(b.t_s) for b in report.barriers],
        "phases": [
            [
                _finite(report.relative_s(p.start_s)),
                _finite(p.duration_s),
                _finite(p.avg_power_w),
                _finite(p.energy_j),
                p.label,
                p.complete,
            ]
            for p in report.phases
        ],
    }
    if totals.size and not np.isnan(totals).all():
        data["node_power"] = {
            "nodes": list[JsonValue](names),
            **_packed("node_power_w", "node power (W)", totals),
        }
    return data


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None


def page_json(data: JsonObject) -> str:
    """``data`` as JSON safe inside ``<script type="application/json">``."""
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
