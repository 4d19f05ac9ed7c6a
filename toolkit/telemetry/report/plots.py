"""The report's PNGs, drawn with matplotlib's Agg canvas (no display, no pyplot state)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.energy import DeviceReport
from toolkit.telemetry.report.series import FloatArray
from toolkit.telemetry.report.summary import short_device
from toolkit.telemetry.report.views import DeviceView

PLOTS = ("power", "step_energy", "utilization")
_DPI = 100


def write_plots(report: Report, plots_dir: Path) -> dict[str, Path]:
    """Draw every plot into ``plots_dir``; returns plot name -> PNG path."""
    plots_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, draw in (
        ("power", _power),
        ("step_energy", _step_energy),
        ("utilization", _utilization),
    ):
        figure = Figure(figsize=(11, 5), dpi=_DPI, layout="constrained")
        FigureCanvasAgg(figure)
        draw(report, figure)
        paths[name] = plots_dir / f"{name}.png"
        figure.savefig(paths[name], format="png")
    return paths


def _power(report: Report, figure: Figure) -> None:
    ax = figure.add_subplot()
    colors = _colors(report)
    for node in report.nodes.values():
        for device in node.devices.values():
            color = colors[(node.name, device.device)]
            view = device.view
            if view is not None and view.power_w is not None:
                ax.plot(
                    *_relative(report, view, view.power_w),
                    color=color,
                    lw=0.9,
                    label=f"{node.name}/{short_device(device.device)}",
                )
            for i, gap in enumerate(device.gaps):
                ax.axvspan(
                    report.relative_s(gap.start_s),
                    report.relative_s(gap.end_s),
                    color=color,
                    alpha=0.15,
                    hatch="//",
                    label=f"no samples: {node.name}/{short_device(device.device)}"
                    if not i
                    else None,
                )
    _barrier_lines(report, ax)
    ax.set_xlim(0.0, max(report.window.duration_s, 1e-9))
    ax.set_xlabel(f"seconds since the run's start (head {report.timeline.head}'s clock)")
    ax.set_ylabel("power (W)")
    ax.set_title("Power per device, aligned across nodes (shaded: no samples)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    ax.grid(alpha=0.3)


def _step_energy(report: Report, figure: Figure) -> None:
    ax = figure.add_subplot()
    values = [s.energy_j for s in report.steps if s.complete] or [s.energy_j for s in report.steps]
    stats = report.step_stats
    if not values or stats is None:
        _empty(ax, "no step markers: no per-step energy")
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
    devices = [d for n in report.nodes.values() for d in n.devices.values() if d.view]
    gpus = [
        d
        for d in devices
        if d.kind == "gpu" and d.view and {"gpu_util_pct", "sm_clock_mhz"} & set(d.view.readings)
    ]
    if gpus:
        util_ax, clock_ax = figure.subplots(2, 1, sharex=True)
        for device in gpus:
            label = f"{device.node}/{short_device(device.device)}"
            _line(report, util_ax, device, "gpu_util_pct", label)
            _line(report, clock_ax, device, "sm_clock_mhz", label)
        util_ax.set_ylabel("GPU utilisation (%)")
        clock_ax.set_ylabel("SM clock (MHz)")
        util_ax.set_title("GPU utilisation and SM clocks")
        util_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
        axes = [util_ax, clock_ax]
    else:
        ax = figure.add_subplot()
        hosts = [
            d for d in devices if d.kind == "host" and d.view and "cpu_util_pct" in d.view.readings
        ]
        if not hosts:
            _empty(ax, "no utilisation readings")
            return
        for device in hosts:
            _line(report, ax, device, "cpu_util_pct", device.node)
        ax.set_ylabel("host CPU utilisation (%)")
        ax.set_title("Host CPU utilisation (no GPU readings)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
        axes = [ax]
    for ax in axes:
        _barrier_lines(report, ax)
        ax.set_xlim(0.0, max(report.window.duration_s, 1e-9))
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("seconds since the run's start")


def _line(report: Report, ax: Axes, device: DeviceReport, name: str, label: str) -> None:
    view = device.view
    if view is not None and name in view.readings:
        ax.plot(*_relative(report, view, view.readings[name]), lw=0.9, label=label)


def _relative(
    report: Report, view: DeviceView, values: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Bucket middles relative to the window's start, and the values (NaN breaks the line)."""
    x: FloatArray = view.buckets.middle_s - report.window.start_s
    return x, values


def _barrier_lines(report: Report, ax: Axes) -> None:
    for i, barrier in enumerate(report.barriers):
        ax.axvline(
            report.relative_s(barrier.t_s),
            color="0.4",
            ls="--",
            lw=0.7,
            label="barrier exit" if i == 0 else None,
        )


def _colors(report: Report) -> dict[tuple[str, str], str]:
    keys = [(n.name, d) for n in report.nodes.values() for d in n.devices]
    palette = [f"C{i}" for i in range(10)]
    return {key: palette[i % len(palette)] for i, key in enumerate(keys)}


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
