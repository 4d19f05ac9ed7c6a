"""report.html: one self-contained, offline page from ``templates/report.html.j2``.

Nothing is fetched: the styles and the script (``templates/report_view.js``) are
inline, the canvases draw from JSON embedded in the page (``canvas_data.py``), and the
PNGs are linked next to it. Long tables (a row per device, per phase, per check) are
folded and filterable, so the page opens as fast with 1,000 GPUs as with one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from toolkit.inventory.hostrange import name_ranges
from toolkit.resources import data_dir
from toolkit.telemetry.report.alike_nodes import NodeGroup, devices_of, group_nodes
from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.figures.outliers import Outliers
from toolkit.telemetry.report.grid import Grid, device_grid
from toolkit.telemetry.report.page.canvas_data import page_data, page_json
from toolkit.telemetry.report.summary_json import summary_dict
from toolkit.telemetry.report.terminal import (
    check_summary,
    outlier_text,
    outliers_of,
    rules_text,
    short_device,
    steps_from_line,
    straggler_line,
)
from toolkit.telemetry.report.units import value_range

TEMPLATE = "report.html.j2"
# Tables with at most this many rows are shown open; longer ones are folded.
OPEN_ROWS = 16
OUTLIER_ROWS = 20  # outliers shown before the fold


@cache
def _environment() -> jinja2.Environment:
    # Its own environment: the shared one (toolkit.resources) renders shell text and
    # does not escape; this one is HTML, so everything from the run is escaped.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        keep_trailing_newline=True,
    )
    env.filters["num"] = _num
    env.filters["sig"] = significant
    env.filters["pct"] = lambda value: "-" if value is None else f"{value:.1%}"
    env.filters["short"] = short_device
    return env


def significant(value: Any, digits: int = 4) -> str:
    """A rate to ``digits`` significant figures, with thousands separators.

    3,392 tokens/J, 0.0002948 J/token, 52.12 J/step (not 3,392.0965 or 0.000295).
    """
    if value is None:
        return "-"
    number = float(value)
    if number == 0 or not math.isfinite(number):
        return f"{number:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(number))))
    return f"{number:,.{decimals}f}"


def _num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return f"{float(value):,.{digits}f}"


def render_html(
    report: Report, plots: dict[str, Path], html_dir: Path, grid: Grid | None = None
) -> str:
    """The page; ``plots`` are linked relative to ``html_dir`` (where the page is written)."""
    links = {name: path.relative_to(html_dir).as_posix() for name, path in plots.items()}
    grid = grid if grid is not None else device_grid(report)
    outliers = outliers_of(report)
    devices = sum(len(node.devices) for node in report.nodes.values())
    return (
        _environment()
        .get_template(TEMPLATE)
        .render(
            s=summary_dict(report),
            plots=links,
            # page_json escapes <, > and &: the JSON cannot end the script element.
            data=Markup(page_json(page_data(report, grid))),
            rules=rules_text(outliers),
            drawable=not grid.empty,
            rows=len(grid.rows),
            kind=("GPU" if grid.kind == "gpu" else "host") + ("s" if len(grid.rows) != 1 else ""),
            groups=_groups(report, outliers),
            outliers=_outlier_rows(outliers),
            waiting=straggler_line(report),
            power=report.power,
            steps_from=steps_from_line(report),
            checks=check_summary(report.cross_checks) if report.cross_checks else None,
            open_nodes=len(report.nodes) <= OPEN_ROWS,
            open_devices=devices <= OPEN_ROWS,
            open_phases=len(report.phases) <= OPEN_ROWS,
            open_checks=len(report.cross_checks) <= OPEN_ROWS,
            outlier_rows=OUTLIER_ROWS,
        )
    )


@dataclass(frozen=True)
class GroupRow:
    """One row of the page's node table: alike nodes together, or one node that differs.

    Attributes:
        names: The nodes, as host ranges.
        count: How many nodes.
        alike: Whether they are alike (False: one node that stands out).
        devices: What each has, e.g. ``2 GPUs + host``.
        status: The first node's status, with its error.
        energy: The nodes' energy, as a range with its unit.
        avg: Their average power, as a range.
        peak: Their peak power, as a range.
        covered: The least share of the window any of them covers (0 to 1).
    """

    names: str
    count: int
    alike: bool
    devices: str
    status: str
    energy: str
    avg: str
    peak: str
    covered: float


@dataclass(frozen=True)
class OutlierRow:
    """One row of the page's outlier table: a device, or a node whose devices all stand out.

    Attributes:
        node: The node.
        device: The device; None for the whole node.
        who: How the row names the device (or ``all N devices``).
        what: What stands out, each figure against its median.
        score: The largest score among them.
    """

    node: str
    device: str | None
    who: str
    what: str
    score: float


def _groups(report: Report, outliers: Outliers) -> list[GroupRow]:
    """Alike nodes on one row each, then each node that differs."""
    odd = {o.node for o in outliers.found if o.device is None}
    return [_group(g) for g in group_nodes(list(report.nodes.values()), odd)]


def _group(group: NodeGroup) -> GroupRow:
    nodes = group.nodes
    gpus, host, _ = devices_of(nodes[0])
    first = nodes[0]
    return GroupRow(
        names=name_ranges(group.names, max_chars=80),
        count=len(nodes),
        alike=group.alike,
        devices=f"{gpus} GPU{'s' if gpus != 1 else ''}" + (" + host" if host else ""),
        status=first.status + (f" ({first.error})" if first.error else ""),
        energy=value_range("J", [n.energy_j for n in nodes]),
        avg=value_range("W", [n.avg_power_w for n in nodes]),
        peak=value_range("W", [n.peak_power_w for n in nodes]),
        covered=min(n.covered_fraction for n in nodes),
    )


def _outlier_rows(outliers: Outliers) -> list[OutlierRow]:
    return [
        OutlierRow(
            node=node,
            device=device,
            who=short_device(device) if device else f"all {found[0].devices} devices",
            what="; ".join(outlier_text(outliers, o) for o in found),
            score=max(o.score for o in found),
        )
        for node, device, found in outliers.subjects()
    ]
