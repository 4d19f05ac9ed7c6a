"""What every report PNG shares: barrier lines, node labels, the time axis, empty panels."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba

from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.figures.energy import DeviceReport
from toolkit.telemetry.report.grid import node_power, spread
from toolkit.telemetry.report.inputs.series import FloatArray

# At most this many lines (devices or nodes) get a line and a legend entry each.
FEW_LINES = 8
# A label every this many pixels at most, on a node axis.
LABEL_PX = 14
# More barriers than this: ticks along a heatmap's top edge instead of lines across it.
MANY_BARRIERS = 60
# Nodes thinner than this (pixels) get no boundary line: it would hide their rows.
BOUNDARY_PX = 6


def barrier_lines(report: Report, ax: Axes, label: bool = True, over_image: bool = False) -> None:
    """A dashed line at every barrier exit, one collection however many there are.

    Over a heatmap (``over_image``) with more than ``MANY_BARRIERS`` barriers, full lines
    would hide the cells: each barrier is a tick along the panel's top edge instead.
    """
    times = [report.relative_s(b.t_s) for b in report.barriers]
    if not times:
        return
    many = len(times) > MANY_BARRIERS
    low = 0.96 if many and over_image else 0.0
    ax.vlines(
        times,
        low,
        1,
        transform=ax.get_xaxis_transform(),
        colors=[to_rgba("0.1" if low else "0.35", 0.8 if low else 0.3 if many else 0.7)],
        linestyles="-" if low else "--",
        linewidths=0.7,
        label="barrier exit" if label else "_barriers",
    )


def time_axis(report: Report, ax: Axes, xlabel: bool = True) -> None:
    """The window on the x axis, in seconds since its start."""
    ax.set_xlim(0.0, max(report.window.duration_s, 1e-9))
    if xlabel:
        ax.set_xlabel(f"seconds since the run's start (head {report.timeline.head}'s clock)")


def node_ticks(ax: Axes, nodes: list[tuple[str, int, int]], height_px: float) -> None:
    """Node names at their rows' middles; every k-th when they would not fit."""
    every = max(1, int(np.ceil(len(nodes) * LABEL_PX / max(height_px, 1.0))))
    shown = nodes[::every]
    ax.set_yticks([first + count / 2 for _, first, count in shown])
    ax.set_yticklabels([name for name, _, _ in shown], fontsize="x-small")


def node_bounds(
    ax: Axes, nodes: list[tuple[str, int, int]], x_max: float, height_px: float
) -> None:
    """A thin line between two nodes' rows, when the nodes are tall enough to spare it."""
    rows = sum(count for _, _, count in nodes)
    thinnest = min((count for _, _, count in nodes), default=0)
    if rows and thinnest * height_px / rows >= BOUNDARY_PX:
        bounds = [first for _, first, _ in nodes[1:]]
        if bounds:
            ax.hlines(bounds, 0, x_max, colors="white", linewidths=0.6)


def node_totals(report: Report, ax: Axes) -> bool:
    """Each node's power (the sum of its counted devices): lines, or a band when many.

    Returns whether there was anything to draw.
    """
    names, totals = node_power(report)
    if totals.size == 0 or np.isnan(totals).all():
        return False
    x = middles(report, totals.shape[1])
    if len(names) <= FEW_LINES:
        for name, row in zip(names, totals, strict=True):
            ax.plot(x, row, lw=1.0, label=name)
    else:
        for row in totals:
            ax.plot(x, row, lw=0.4, color="tab:blue", alpha=0.25)
        band = spread(totals)
        ax.fill_between(x, band["min"], band["max"], color="tab:blue", alpha=0.12, label="min-max")
        ax.plot(x, band["median"], color="black", lw=1.0, label=f"median of {len(names)} nodes")
    ax.set_ylabel("node power (W)")
    ax.grid(alpha=0.3)
    return True


def middles(report: Report, count: int) -> FloatArray:
    """The middles of ``count`` equal buckets over the window, in seconds since its start."""
    width = report.window.duration_s / max(count, 1)
    return np.asarray((np.arange(count) + 0.5) * width, dtype=np.float64)


def empty(ax: Axes, text: str) -> None:
    """A panel that says why it is empty."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def report_devices(report: Report) -> list[DeviceReport]:
    """Every device of the report, node by node."""
    return [d for n in report.nodes.values() for d in n.devices.values()]
