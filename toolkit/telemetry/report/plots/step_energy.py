"""step_energy.png: the histogram of energy per optimizer step, with its p10, median, p90."""

from __future__ import annotations

from matplotlib.figure import Figure

from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.plots.axes import empty


def draw_step_energy(report: Report, figure: Figure) -> None:
    """step_energy.png's histogram (complete steps, else every step)."""
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
