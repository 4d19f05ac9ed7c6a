"""distribution.png: each device's energy, power, throttling and temperature by its median.

A dot per device (GPUs, or hosts when there is none), in node order; the median, the
outlier thresholds, and the outliers in red with the furthest named.
"""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.figures.outliers import (
    DeviceFigures,
    Outlier,
    Outliers,
    report_figures,
)
from toolkit.telemetry.report.inputs.series import FloatArray
from toolkit.telemetry.report.plots.axes import empty
from toolkit.telemetry.report.terminal import short_device

NAMED = 3  # outliers named per panel
PANELS = (
    ("energy_j", "energy (J)"),
    ("avg_power_w", "average power (W)"),
    ("throttled_s", "time throttled (s)"),
    ("max_temperature_c", "hottest bucket (°C)"),
)


def draw_distribution(report: Report, figure: Figure, outliers: Outliers) -> None:
    """A panel per figure the devices have, each against the median."""
    figures = report_figures(report.nodes.values())
    kind = "gpu" if any(f.kind == "gpu" for f in figures) else "host"
    devices = [f for f in figures if f.kind == kind]
    medians = outliers.medians.get(kind, {})
    panels = [(m, label) for m, label in PANELS if any(_get(d, m) is not None for d in devices)]
    if not devices or not panels:
        empty(figure.add_subplot(), "no device figures to compare")
        return
    axes = figure.subplots(2, 2).ravel() if len(panels) > 2 else figure.subplots(1, len(panels))
    axes = np.atleast_1d(axes)
    for ax, (metric, label) in zip(axes, panels, strict=False):
        _panel(ax, devices, metric, label, medians.get(metric), outliers, kind)
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    what = "GPUs" if kind == "gpu" else "hosts"
    figure.suptitle(
        f"{len(devices)} {what} against their median (line; dotted: outlier thresholds, "
        "red: outliers)"
    )


def _get(device: DeviceFigures, metric: str) -> float | None:
    value = getattr(device, metric)
    return None if value is None else float(value)


def _panel(
    ax: Axes,
    devices: list[DeviceFigures],
    metric: str,
    label: str,
    median: float | None,
    outliers: Outliers,
    kind: str,
) -> None:
    values = np.array([np.nan if (v := _get(d, metric)) is None else v for d in devices])
    found = [o for o in outliers.found if o.metric == metric and o.kind == kind]
    out_devices = {(o.node, o.device) for o in found}
    out_nodes = {o.node for o in found if o.device is None}
    out = np.array([(d.node, d.device) in out_devices or d.node in out_nodes for d in devices])
    x = np.arange(len(devices))
    size = 14 if len(devices) <= 64 else 5
    ax.scatter(x[~out], values[~out], s=size, color="tab:blue", linewidths=0)
    ax.scatter(x[out], values[out], s=size * 1.6, color="tab:red", linewidths=0)
    if median is not None:
        rule = outliers.rule(metric)
        ax.axhline(median, color="black", lw=1.0)
        if rule.relative:
            limits = [median * (1 + rule.threshold)] + (
                [median * (1 - rule.threshold)] if rule.below else []
            )
        else:
            limits = [median + rule.threshold]
        for limit in limits:
            ax.axhline(limit, color="black", lw=0.8, ls=":")
    _name_outliers(ax, devices, values, found)
    _node_axis(ax, devices)
    ax.set_title(label, fontsize="medium")
    ax.grid(alpha=0.3, axis="y")


def _name_outliers(
    ax: Axes, devices: list[DeviceFigures], values: FloatArray, found: list[Outlier]
) -> None:
    """Name the furthest ``NAMED`` outliers: a device, or a node once for all its devices."""
    where = {(d.node, d.device): i for i, d in enumerate(devices)}
    for outlier in found[:NAMED]:
        if outlier.device is not None:
            i = where.get((outlier.node, outlier.device))
            label = f"{outlier.node}/{short_device(outlier.device)}"
        else:
            mine = [i for (node, _), i in where.items() if node == outlier.node]
            i = mine[len(mine) // 2] if mine else None
            label = f"{outlier.node} (all {outlier.devices})"
        if i is None or np.isnan(values[i]):
            continue
        ax.annotate(
            label,
            (float(i), float(values[i])),
            xytext=(4, 4),
            textcoords="offset points",
            fontsize="x-small",
            color="tab:red",
        )


def _node_axis(ax: Axes, devices: list[DeviceFigures]) -> None:
    starts = [i for i, d in enumerate(devices) if i == 0 or devices[i - 1].node != d.node]
    every = max(1, int(np.ceil(len(starts) / 12)))
    shown = starts[::every]
    ax.set_xticks(shown)
    ax.set_xticklabels(
        [devices[i].node for i in shown], rotation=45, ha="right", fontsize="x-small"
    )
    if 1 < len(starts) <= 200:
        bounds = [start - 0.5 for start in starts[1:]]
        ax.vlines(bounds, 0, 1, transform=ax.get_xaxis_transform(), colors="0.85", lw=0.5)
    ax.set_xlim(-1, len(devices))
