"""The report's one exception: the run directory cannot be turned into a report."""

from __future__ import annotations

from toolkit.errors import RtkError


class ReportError(RtkError):
    """The run directory lacks what a report needs (telemetry, samples) or cannot be read."""
