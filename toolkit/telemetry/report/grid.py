"""The report's views as matrices: a row per device (grouped by node), a column per bucket.

The heatmap PNG and the page's canvas both draw from a ``Grid``; the node panel from
``node_power``. Built from the bucketed views (``figures/views.py``), so a grid is at
most ``MAX_BUCKETS`` columns wide whatever the run's length: 512 GPUs by 1,000 buckets
by five readings is 20 MB of float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.figures.energy import DeviceReport
from toolkit.telemetry.report.figures.views import Buckets, DeviceView
from toolkit.telemetry.report.inputs.series import FloatArray


@dataclass(frozen=True)
class Layer:
    """One reading drawn as a heatmap.

    Attributes:
        name: The reading (``power_w``, a ``DeviceView.readings`` key, or ``throttled``).
        label: How it reads, with its unit.
        colormap: The matplotlib colormap it is drawn with (the page has its own ramps).
    """

    name: str
    label: str
    colormap: str


GPU_LAYERS = (
    Layer("power_w", "power (W)", "viridis"),
    Layer("sm_clock_mhz", "SM clock (MHz)", "cividis"),
    Layer("temperature_c", "temperature (°C)", "inferno"),
    Layer("throttled", "throttled (share of samples)", "Reds"),
    Layer("gpu_util_pct", "GPU utilisation (%)", "Blues"),
)
HOST_LAYERS = (
    Layer("power_w", "power (W)", "viridis"),
    Layer("cpu_util_pct", "CPU utilisation (%)", "Blues"),
)


@dataclass(frozen=True)
class Grid:
    """Devices of one kind by time buckets.

    Attributes:
        kind: ``gpu`` (when the run has GPUs) or ``host``.
        rows: (node, device) per row, nodes in manifest order.
        nodes: (node, first row, rows) per node with devices of ``kind``.
        buckets: The time buckets (None when no device has a view).
        layers: The layers that some row has, in drawing order.
        values: Layer name -> rows x buckets, NaN where a bucket has no sample.
    """

    kind: str
    rows: list[tuple[str, str]]
    nodes: list[tuple[str, int, int]]
    buckets: Buckets | None
    layers: list[Layer]
    values: dict[str, FloatArray]

    @property
    def empty(self) -> bool:
        """Whether there is nothing to draw."""
        return not self.rows or self.buckets is None or not self.layers


def report_buckets(report: Report) -> Buckets | None:
    """The buckets the report's views share (None when no device has a view)."""
    for node in report.nodes.values():
        for device in node.devices.values():
            if device.view is not None:
                return device.view.buckets
    return None


def device_grid(report: Report) -> Grid:
    """The GPUs by time; the hosts when the run has no GPU."""
    devices = [d for n in report.nodes.values() for d in n.devices.values()]
    kind = "gpu" if any(d.kind == "gpu" for d in devices) else "host"
    chosen = [d for d in devices if d.kind == kind]
    buckets = report_buckets(report)
    nodes: list[tuple[str, int, int]] = []
    for i, device in enumerate(chosen):
        if nodes and nodes[-1][0] == device.node:
            name, first, count = nodes[-1]
            nodes[-1] = (name, first, count + 1)
        else:
            nodes.append((device.node, i, 1))
    values: dict[str, FloatArray] = {}
    layers: list[Layer] = []
    if buckets is not None:
        for layer in GPU_LAYERS if kind == "gpu" else HOST_LAYERS:
            matrix = np.full((len(chosen), buckets.count), np.nan)
            for row, device in enumerate(chosen):
                data = _layer(device.view, layer.name)
                if data is not None:
                    matrix[row] = data
            if not np.isnan(matrix).all():
                values[layer.name] = matrix
                layers.append(layer)
    rows = [(d.node, d.device) for d in chosen]
    return Grid(kind, rows, nodes, buckets, layers, values)


def _layer(view: DeviceView | None, name: str) -> FloatArray | None:
    if view is None:
        return None
    if name == "power_w":
        return view.power_w
    if name == "throttled":
        return view.throttled
    return view.readings.get(name)


def node_power(report: Report) -> tuple[list[str], FloatArray]:
    """Each node's power per bucket: the sum of its counted devices (as its energy is).

    NaN where one of them has no sample in the bucket: a sum with a device missing
    would read as a drop in power.
    """
    buckets = report_buckets(report)
    names = list(report.nodes)
    if buckets is None:
        return names, np.empty((len(names), 0))
    totals = np.full((len(names), buckets.count), np.nan)
    for row, node in enumerate(report.nodes.values()):
        counted = [_power(d) for d in node.devices.values() if d.counted]
        known = [p for p in counted if p is not None]
        if known:
            totals[row] = np.sum(known, axis=0)
    return names, totals


def _power(device: DeviceReport) -> FloatArray | None:
    return device.view.power_w if device.view is not None else None


def spread(values: FloatArray) -> dict[str, FloatArray]:
    """Per column (bucket) across rows: min, p10, median, p90, max (NaN rows ignored)."""
    known = ~np.isnan(values).all(axis=0)
    result = {
        name: np.full(values.shape[1], np.nan) for name in ("min", "p10", "median", "p90", "max")
    }
    if known.any():
        inside = values[:, known]
        for name, q in (("min", 0), ("p10", 10), ("median", 50), ("p90", 90), ("max", 100)):
            result[name][known] = np.nanpercentile(inside, q, axis=0)
    return result
