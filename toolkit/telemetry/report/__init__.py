"""``rtk report``: a run directory's telemetry, aligned, as figures, tables and plots.

``build_report(run_dir)`` reads the run directory (docs/telemetry.md) and computes
every figure; ``write_report(report)`` writes ``<run_dir>/report/``: summary.json,
traces.csv, plots/*.png, report.html and trace.json.gz (for Perfetto).
``format_summary(report)`` is the terminal text and ``summary_dict(report)`` the JSON.

Inside: ``inputs/`` reads the run directory onto the head's timeline, ``figures/``
computes from it, ``build.py`` joins both into a ``Report``. Its outputs:
``terminal.py`` (the text), ``summary_json.py``, ``traces_csv.py``, ``plots/``,
``page/`` (report.html) and ``trace/`` (Perfetto); ``grid.py`` is the device-by-time
matrix that plots and page draw from; ``write.py`` writes every file.
"""

from __future__ import annotations

from toolkit.errors import ReportError
from toolkit.telemetry.report.build import Report, build_report
from toolkit.telemetry.report.summary_json import summary_dict
from toolkit.telemetry.report.terminal import format_summary
from toolkit.telemetry.report.write import ReportFiles, write_report

__all__ = [
    "Report",
    "ReportError",
    "ReportFiles",
    "build_report",
    "format_summary",
    "summary_dict",
    "write_report",
]
