"""``write_plots``: the report's PNGs, drawn with matplotlib's Agg canvas, into plots/.

No display and no pyplot state; one module a plot:

- ``power.png`` (``power.py``): a line per device with few devices, else each node's
  total power;
- ``heatmap.png`` (``heatmap.py``): every GPU by time for power, SM clock, temperature
  and throttling;
- ``distribution.png`` (``distribution.py``): each GPU's energy, power, throttling and
  temperature against the cluster median, outliers named;
- ``step_energy.png`` (``step_energy.py``): the per-step energy histogram;
- ``utilization.png`` (``utilization.py``): GPU utilisation and SM clock;
- ``power_policy.png`` (``power_policy.py``), only for a run with a power policy: the
  limits it tried, their energy per step, and what it kept.

Every plot is drawn from the bucketed views: the same size and time at any run length.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.grid import device_grid
from toolkit.telemetry.report.plots.distribution import draw_distribution
from toolkit.telemetry.report.plots.heatmap import draw_heatmap, heatmap_size
from toolkit.telemetry.report.plots.power import draw_power
from toolkit.telemetry.report.plots.power_policy import draw_power_policy
from toolkit.telemetry.report.plots.step_energy import draw_step_energy
from toolkit.telemetry.report.plots.utilization import draw_utilization
from toolkit.telemetry.report.terminal import outliers_of

PLOTS = ("power", "heatmap", "distribution", "step_energy", "utilization")  # every run's
_DPI = 100


def write_plots(report: Report, plots_dir: Path) -> dict[str, Path]:
    """Draw every plot into ``plots_dir``; returns plot name -> PNG path."""
    plots_dir.mkdir(parents=True, exist_ok=True)
    grid = device_grid(report)
    outliers = outliers_of(report)
    draws: dict[str, tuple[tuple[float, float], Callable[[Figure], None]]] = {
        "power": ((11, 5), lambda f: draw_power(report, f)),
        "heatmap": (heatmap_size(grid), lambda f: draw_heatmap(report, f, grid)),
        "distribution": ((12, 7), lambda f: draw_distribution(report, f, outliers)),
        "step_energy": ((11, 5), lambda f: draw_step_energy(report, f)),
        "utilization": ((11, 5), lambda f: draw_utilization(report, f)),
    }
    power = report.power
    if power is not None:
        draws["power_policy"] = ((12, 5), lambda f: draw_power_policy(power, f))
    paths = {}
    for name, (size, draw) in draws.items():
        figure = Figure(figsize=size, dpi=_DPI, layout="constrained")
        FigureCanvasAgg(figure)
        draw(figure)
        paths[name] = plots_dir / f"{name}.png"
        figure.savefig(paths[name], format="png")
    return paths
