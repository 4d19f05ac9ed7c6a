"""utilization.png: GPU utilisation and SM clock (host CPU utilisation without GPUs).

A line per GPU when few, else the median with the p10-p90 and min-max bands across
GPUs.
"""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.figures.energy import DeviceReport
from toolkit.telemetry.report.grid import spread
from toolkit.telemetry.report.plots.axes import (
    FEW_LINES,
    barrier_lines,
    empty,
    middles,
    report_devices,
    time_axis,
)
from toolkit.telemetry.report.terminal import short_device


def draw_utilization(report: Report, figure: Figure) -> None:
    """utilization.png: GPU utilisation over SM clock, else host CPU utilisation."""
    devices = [d for d in report_devices(report) if d.view]
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
    x = middles(report, rows[0].size)
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
