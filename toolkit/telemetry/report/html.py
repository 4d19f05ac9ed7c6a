"""report.html: the summary's tables and the plots, from ``templates/report.html.j2``."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from toolkit.resources import data_dir
from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.summary import short_device, summary_dict

TEMPLATE = "report.html.j2"


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
    env.filters["pct"] = lambda value: "-" if value is None else f"{value:.1%}"
    env.filters["short"] = short_device
    return env


def _num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return f"{float(value):,.{digits}f}"


def render_html(report: Report, plots: dict[str, Path], html_dir: Path) -> str:
    """The page; ``plots`` are linked relative to ``html_dir`` (where the page is written)."""
    links = {name: path.relative_to(html_dir).as_posix() for name, path in plots.items()}
    return _environment().get_template(TEMPLATE).render(s=summary_dict(report), plots=links)
