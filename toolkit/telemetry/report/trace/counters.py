"""The trace's counter tracks: each device's power, SM clock and temperature.

Each device is a counter named after it in its node's process (``GPU 0 (GPU-0a1b2c3d)``,
``host``), whose arguments Perfetto shows as one track each (``... power_w``). By
default the points are the report's bucketed views (at most ``MAX_BUCKETS`` per device,
each mean at its bucket's start, a point equal to the one before left out); for a span
they are every sample in it, read node by node and batch by batch, on the head's clock.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from toolkit.rundir.devices import DeviceInfo, GpuInfo
from toolkit.rundir.traces import SCHEMA, iter_batches
from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.inputs.series import FloatArray
from toolkit.telemetry.report.terminal import short_device
from toolkit.telemetry.report.trace.events import TraceEventWriter

COUNTERS = ("power_w", "sm_clock_mhz", "temperature_c")
_SAMPLE_COLUMNS = ("wall_s", "device", *COUNTERS)
_SAMPLE_SCHEMA = pa.schema([SCHEMA.field(name) for name in _SAMPLE_COLUMNS])


def bucket_counters(report: Report, pids: dict[str, int], out: TraceEventWriter) -> int:
    """Every device's bucketed view; a point equal to the one before is left out."""
    written = 0
    for node_name, node in report.nodes.items():
        info = report.data.manifest.nodes[node_name].devices
        for device, figures in node.devices.items():
            view = figures.view
            if view is None:
                continue
            columns = {"power_w": view.power_w}
            if figures.kind == "gpu":
                columns.update({k: view.readings.get(k) for k in COUNTERS[1:]})
            buckets = view.buckets
            t_s = np.asarray(
                buckets.start_s + np.arange(buckets.count) * buckets.width_s, np.float64
            )
            label = _label(device, info.get(device))
            written += _counters(out, pids[node_name], label, t_s, columns, dedup=True)
    return written


def sample_counters(
    report: Report, pids: dict[str, int], span: tuple[float, float], out: TraceEventWriter
) -> int:
    """Every sample in ``span``, node by node (only the span's rows are kept)."""
    written = 0
    for node_name, files in report.data.traces.items():
        offset_s = report.timeline.offsets_s.get(node_name, 0.0)
        table = _span_rows(files, offset_s, span)
        if table.num_rows == 0:
            continue
        info = report.data.manifest.nodes[node_name].devices
        present = set(pc.unique(table.column("device")).to_pylist())
        for device in [*[d for d in info if d in present], *sorted(present - set(info))]:
            rows = table.filter(pc.equal(table.column("device"), device))
            rows = rows.take(pc.sort_indices(rows, [("wall_s", "ascending")]))
            t_s: FloatArray = rows.column("wall_s").to_numpy() - offset_s
            columns: dict[str, FloatArray | None] = {k: rows.column(k).to_numpy() for k in COUNTERS}
            label = _label(device, info.get(device))
            written += _counters(out, pids[node_name], label, t_s, columns, dedup=False)
    return written


def _span_rows(files: list[Path], offset_s: float, span: tuple[float, float]) -> pa.Table:
    """A node's samples in ``span`` (head timeline), read batch by batch."""
    lo, hi = span[0] + offset_s, span[1] + offset_s  # on the node's own clock
    kept = []
    for batch in iter_batches(files, columns=_SAMPLE_COLUMNS):
        wall = batch.column("wall_s")
        kept.append(batch.filter(pc.and_(pc.greater_equal(wall, lo), pc.less_equal(wall, hi))))
    return pa.Table.from_batches(kept, schema=_SAMPLE_SCHEMA)


def _counters(
    out: TraceEventWriter,
    pid: int,
    label: str,
    t_s: FloatArray,
    columns: dict[str, FloatArray | None],
    dedup: bool,
) -> int:
    """One counter event per time with a value (to the mW, MHz, m°C; ``dedup``: no repeat)."""
    texts = []
    for key, values in columns.items():
        if values is not None:
            # Arrow writes each value's shortest form (300, 173.856), at C speed.
            shown = pc.cast(pc.round(pa.array(values, pa.float64()), 3), pa.string())
            missing = np.isnan(values).tolist()
            texts.append(
                [
                    "" if m else f'"{key}":{v}'
                    for v, m in zip(shown.to_pylist(), missing, strict=True)
                ]
            )
    ts_us = np.rint(t_s * 1e6).astype(np.int64).tolist()
    written, last = 0, ""
    for i, ts in enumerate(ts_us):
        args = ",".join(text[i] for text in texts if text[i])
        if not args or (dedup and args == last):
            continue
        out.counter(pid, ts, label, "{" + args + "}")
        written += 1
        last = args
    return written


def _label(device: str, info: DeviceInfo | None) -> str:
    """``host``, or ``GPU 0 (GPU-0a1b2c3d)`` (the NVML index when the manifest has it)."""
    if device == "host":
        return "host"
    index = info.nvml_index if isinstance(info, GpuInfo) else None
    short = short_device(device)
    return f"GPU {index} ({short})" if index is not None else short
