"""The sweep's PNGs, drawn with matplotlib's Agg canvas (no display, no pyplot state).

``energy_per_token_vs_<axis>.png``: energy per token against the power limit (or, in a
sweep without one, the first axis), one line per combination of the other axes.
``pareto_front.png``: every configuration with its spread, and the Pareto front, on
the figures the front is drawn on (``pareto.ParetoBasis``): tokens/s against J/token
(or output tokens for vLLM), else time against energy per run; the title says which.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from toolkit.profile.pareto import pareto_basis, pareto_front
from toolkit.profile.results import (
    ConfigRow,
    axis_text,
    config_label,
    value_key,
    varying_axes,
)

POWER_LIMIT_AXIS = "power_limit_w"
ENERGY_PER_TOKEN = "energy_per_token"
PARETO_FRONT = "pareto_front"
_DPI = 100
# More lines than this in the energy plot: the legend is left out (it would hide the plot).
_MAX_LEGEND = 30


def energy_plot_axis(axes: Sequence[str]) -> str | None:
    """The x axis of the energy-per-token plot: the power limit, else the first axis."""
    if POWER_LIMIT_AXIS in axes:
        return POWER_LIMIT_AXIS
    return axes[0] if axes else None


def energy_plot_name(axes: Sequence[str]) -> str:
    """``energy_per_token_vs_power_limit.png``, else ``..._vs_<first axis>.png``.

    ``..._vs_config.png`` in a sweep without axes.
    """
    x_axis = energy_plot_axis(axes)
    if x_axis == POWER_LIMIT_AXIS:
        return f"{ENERGY_PER_TOKEN}_vs_power_limit.png"
    return f"{ENERGY_PER_TOKEN}_vs_{re.sub(r'[^A-Za-z0-9_.-]', '_', x_axis or 'config')}.png"


def write_plots(rows: Sequence[ConfigRow], axes: Sequence[str], plots_dir: Path) -> dict[str, Path]:
    """Draw both plots into ``plots_dir``; returns plot name -> PNG path.

    Args:
        rows: The configurations, as ``aggregate`` returned them.
        axes: The sweep's axes, in column order.
        plots_dir: Where to write (created if missing).
    """
    plots_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        ENERGY_PER_TOKEN: plots_dir / energy_plot_name(axes),
        PARETO_FRONT: plots_dir / f"{PARETO_FRONT}.png",
    }
    for name, size in ((ENERGY_PER_TOKEN, (11, 5)), (PARETO_FRONT, (11, 6))):
        figure = Figure(figsize=size, dpi=_DPI, layout="constrained")
        FigureCanvasAgg(figure)
        ax = figure.add_subplot()
        if name == ENERGY_PER_TOKEN:
            _energy_per_token(ax, rows, axes)
        else:
            draw_pareto_front(ax, rows)
        figure.savefig(paths[name], format="png")
    return paths


def _energy_per_token(ax: Axes, rows: Sequence[ConfigRow], axes: Sequence[str]) -> None:
    x_axis = energy_plot_axis(axes)
    points = [r for r in rows if math.isfinite(r.energy_per_token_j.mean)]
    if not points:
        _empty(ax, "no configuration has a succeeded repeat with tokens")
        return
    values = [r.axes.get(x_axis) if x_axis else r.config_id for r in points]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    ticks = sorted({axis_text(v): v for v in values}.items(), key=lambda item: value_key(item[1]))
    slot = {text: float(i) for i, (text, _) in enumerate(ticks)}

    def x_of(row: ConfigRow) -> float:
        value = row.axes.get(x_axis) if x_axis else row.config_id
        if numeric and isinstance(value, int | float):
            return float(value)
        return slot[axis_text(value)]

    others = [a for a in varying_axes(rows) if a != x_axis]
    lines: dict[str, list[ConfigRow]] = {}
    for row in points:
        lines.setdefault(config_label(row, others) if others else "", []).append(row)
    for label, members in lines.items():
        members.sort(key=x_of)
        ax.errorbar(
            [x_of(r) for r in members],
            [r.energy_per_token_j.mean for r in members],
            yerr=[r.energy_per_token_j.std for r in members],
            marker="o",
            capsize=3,
            label=label or None,
        )
    if not numeric:
        ax.set_xticks(list(slot.values()), list(slot), rotation=30 if x_axis is None else 0)
    ax.set_xlabel(x_axis or "configuration")
    ax.set_ylabel("energy per token (J)")
    ax.set_title(f"Energy per token against {x_axis or 'configuration'} (mean ± std over repeats)")
    if others and len(lines) <= _MAX_LEGEND:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    ax.grid(alpha=0.3)


def draw_pareto_front(ax: Axes, rows: Sequence[ConfigRow]) -> None:
    """Every configuration and the Pareto front, on the figures ``pareto_basis`` picks."""
    basis = pareto_basis(rows)
    points = [r for r in rows if basis.point(r) is not None]
    if not points:
        _empty(ax, "no configuration has a succeeded repeat")
        return
    x_name, y_name = basis.figures
    ax.errorbar(
        [r.metric(x_name).mean for r in points],
        [r.metric(y_name).mean for r in points],
        xerr=[r.metric(x_name).std for r in points],
        yerr=[r.metric(y_name).std for r in points],
        fmt="o",
        color="tab:blue",
        ecolor="0.55",
        capsize=3,
        label="configuration (mean ± std)",
    )
    front = pareto_front(points, basis)
    ax.plot(
        [r.metric(x_name).mean for r in front],
        [r.metric(y_name).mean for r in front],
        color="tab:red",
        lw=1.2,
        marker="o",
        markersize=11,
        markerfacecolor="none",
        label=f"Pareto front of {basis.label}",
    )
    labelled = varying_axes(rows)
    for row in points:
        ax.annotate(
            config_label(row, labelled),
            (row.metric(x_name).mean, row.metric(y_name).mean),
            textcoords="offset points",
            xytext=(5, 5),
            fontsize="x-small",
        )
    ax.margins(x=0.12, y=0.08)  # room for the labels right of the points
    if basis.unit is None:
        ax.set_xlabel("time per run (s)")
        ax.set_ylabel("energy per run, all nodes (J)")
        corner = "lower left"
    else:
        ax.set_xlabel(f"throughput ({basis.unit}s/s)")
        ax.set_ylabel(f"energy per {basis.unit}, all nodes (J)")
        corner = "lower right"
    title = f"Pareto front of {basis.label} per configuration ({corner} is better)"
    if basis.note:
        title += "\n" + textwrap.fill(f"note: {basis.note}", 110)
    ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
