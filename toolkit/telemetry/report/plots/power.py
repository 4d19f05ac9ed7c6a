"""power.png: power per device with few devices, else each node's total power.

A line per device (its gaps shaded) up to ``FEW_LINES`` devices; with more, each
node's total: a line per node with few nodes, else every node thin with the min-max
band and the median across nodes (``axes.node_totals``).
"""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.plots.axes import (
    FEW_LINES,
    barrier_lines,
    empty,
    middles,
    node_totals,
    report_devices,
    time_axis,
)
from toolkit.telemetry.report.terminal import short_device


def draw_power(report: Report, figure: Figure) -> None:
    """power.png's one panel: device lines, or node totals with many devices."""
    ax = figure.add_subplot()
    devices = [
        d for d in report_devices(report) if d.view is not None and d.view.power_w is not None
    ]
    if len(devices) > FEW_LINES:
        if not node_totals(report, ax):
            empty(ax, "no power readings")
            return
        nodes = len(report.nodes)
        ax.set_title(
            f"Power per node (sum of its counted devices), {nodes} nodes; "
            "the heatmap shows every device"
        )
    else:
        _device_lines(report, ax)
        ax.set_ylabel("power (W)")
        ax.set_title("Power per device, aligned across nodes (shaded: no samples)")
        ax.grid(alpha=0.3)
    barrier_lines(report, ax)
    time_axis(report, ax)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")


def _device_lines(report: Report, ax: Axes) -> None:
    for i, device in enumerate(report_devices(report)):
        color = f"C{i % 10}"
        name = f"{device.node}/{short_device(device.device)}"
        view = device.view
        if view is not None and view.power_w is not None:
            x = middles(report, view.power_w.size)
            ax.plot(x, view.power_w, color=color, lw=0.9, label=name)
        for j, gap in enumerate(device.gaps):
            ax.axvspan(
                report.relative_s(gap.start_s),
                report.relative_s(gap.end_s),
                color=color,
                alpha=0.15,
                hatch="//",
                label=f"no samples: {name}" if not j else None,
            )
