"""The report's PNGs, drawn with matplotlib's Agg canvas (no display, no pyplot state).

- ``power``: a line per device with few devices (``FEW_LINES``), else each node's total
  power (a line per node with few nodes, else every node thin with the min-max band
  and the median across nodes);
- ``heatmap``: every GPU by time for power, SM clock, temperature and throttling
  (``plot_grid.py``);
- ``distribution``: each GPU's energy, power, throttling and temperature against the
  cluster median, outliers named (``plot_spread.py``);
- ``step_energy``: the per-step energy histogram;
- ``utilization``: GPU utilisation and SM clock, a line per GPU when few, else the
  median with the p10-p90 and min-max bands across GPUs.

Every plot is drawn from the bucketed views: the same size and time at any run length.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.energy import DeviceReport
from toolkit.telemetry.report.grid import device_grid, spread
from toolkit.telemetry.report.plot_common import (
    FEW_LINES,
    barrier_lines,
    empty,
    middles,
    node_totals,
    time_axis,
)
from toolkit.telemetry.report.plot_grid import draw_heatmap, heatmap_size
from toolkit.telemetry.report.plot_spread import draw_distribution
from toolkit.telemetry.report.series import FloatArray
from toolkit.telemetry.report.terminal import outliers_of, short_device

PLOTS = ("power", "heatmap", "distribution", "step_energy", "utilization")
_DPI = 100


def write_plots(report: Report, plots_dir: Path) -> dict[str, Path]:
    """Draw every plot into ``plots_dir``; returns plot name -> PNG path."""
    plots_dir.mkdir(parents=True, exist_ok=True)
    grid = device_grid(report)
    outliers = outliers_of(report)
    draws: dict[str, tuple[tuple[float, float], Callable[[Figure], None]]] = {
        "power": ((11, 5), lambda f: _power(report, f)),
        "heatmap": (heatmap_size(grid), lambda f: draw_heatmap(report, f, grid)),
        "distribution": ((12, 7), lambda f: draw_distribution(report, f, outliers)),
        "step_energy": ((11, 5), lambda f: _step_energy(report, f)),
        "utilization": ((11, 5), lambda f: _utilization(report, f)),
    }
    paths = {}
    for name, (size, draw) in draws.items():
        figure = Figure(figsize=size, dpi=_DPI, layout="constrained")
        FigureCanvasAgg(figure)
        draw(figure)
        paths[name] = plots_dir / f"{name}.png"
        figure.savefig(paths[name], format="png")
    return paths


def _devices(report: Report) -> list[DeviceReport]:
    return [d for n in report.nodes.values() for d in n.devices.values()]


def _power(report: Report, figure: Figure) -> None:
    ax = figure.add_subplot()
    devices = [d for d in _devices(report) if d.view is not None and d.view.power_w is not None]
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
    for i, device in enumerate(_devices(report)):
        color = f"C{i % 10}"
        name = f"{device.node}/{short_device(device.device)}"
        view = device.view
        if view is not None and view.power_w is not None:
            ax.plot(_x(report, view.power_w), view.power_w, color=color, lw=0.9, label=name)
        for j, gap in enumerate(device.gaps):
            ax.axvspan(
                report.relative_s(gap.start_s),
                report.relative_s(gap.end_s),
                color=color,
                alpha=0.15,
                hatch="//",
                label=f"no samples: {name}" if not j else None,
            )


def _step_energy(report: Report, figure: Figure) -> None:
    ax = figure.add_subplot()
    values = [s.energy_j for s in report.steps if s.complete] or [s.energy_j for s in report.steps]
    stats = report.step_stats
    if not values or stats is None:
        empty(ax, "no step markers: no per-step energy")
        return
    ax.hist(values, bins=min(max(len(values) // 3, 5), 60), color="tab:blue", alpha=0.8)
    for value, name, style in (
        (stats.p10_j, "p10", ":"),
        (stats.median_j, "median", "-"),
        (stats.p90_j, "p90", ":"),
    ):
        ax.axvline(value, color="black", ls=style, lw=1, label=f"{name} {value:,.1f} J")
    ax.set_xlabel("energy per step, all nodes (J)")
    ax.set_ylabel("steps")
    ax.set_title(
        f"Energy per optimizer step (rank {report.timeline.step_rank}, {len(values)} steps)"
    )
    ax.legend()


def _utilization(report: Report, figure: Figure) -> None:
    devices = [d for d in _devices(report) if d.view]
    gpus = [
        d
        for d in devices
        if d.kind == "gpu" and d.view and {"gpu_util_pct", "sm_clock_mhz"} & set(d.view.readings)
    ]
    if gpus:
        util_ax, clock_ax = figure.subplots(2, 1, sharex=True)
        _readings(report, util_ax, gpus, "gpu_util_pct")
        _readings(report, clock_ax, gpus, "sm_clock_mhz")
        util_ax.set_ylabel("GPU utilisation (%)")
        clock_ax.set_ylabel("SM clock (MHz)")
        util_ax.set_title(
            "GPU utilisation and SM clocks"
            + ("" if len(gpus) <= FEW_LINES else f" across {len(gpus)} GPUs")
        )
        util_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
        axes = [util_ax, clock_ax]
    else:
        ax = figure.add_subplot()
        hosts = [
            d for d in devices if d.kind == "host" and d.view and "cpu_util_pct" in d.view.readings
        ]
        if not hosts:
            empty(ax, "no utilisation readings")
            return
        _readings(report, ax, hosts, "cpu_util_pct")
        ax.set_ylabel("host CPU utilisation (%)")
        ax.set_title("Host CPU utilisation (no GPU readings)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
        axes = [ax]
    for ax in axes:
        barrier_lines(report, ax, label=False)
        time_axis(report, ax, xlabel=ax is axes[-1])
        ax.grid(alpha=0.3)


def _readings(report: Report, ax: Axes, devices: list[DeviceReport], name: str) -> None:
    """A line per device when few, else the median and bands across devices."""
    rows = [d.view.readings[name] for d in devices if d.view and name in d.view.readings]
    if not rows:
        return
    x = _x(report, rows[0])
    if len(devices) <= FEW_LINES:
        for device in devices:
            if device.view and name in device.view.readings:
                label = device.node if device.kind == "host" else None
                label = label or f"{device.node}/{short_device(device.device)}"
                ax.plot(x, device.view.readings[name], lw=0.9, label=label)
        return
    band = spread(np.vstack(rows))
    ax.fill_between(x, band["min"], band["max"], color="tab:blue", alpha=0.12, label="min-max")
    ax.fill_between(x, band["p10"], band["p90"], color="tab:blue", alpha=0.3, label="p10-p90")
    ax.plot(x, band["median"], color="black", lw=1.0, label="median")


def _x(report: Report, values: FloatArray) -> FloatArray:
    return middles(report, values.size)
