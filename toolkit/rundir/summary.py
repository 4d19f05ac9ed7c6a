"""The run's figures in the report's ``summary.json`` (its ``run`` section).

``rtk report`` writes ``report/summary.json`` (``toolkit.telemetry.report.summary``),
the ``run`` section with ``RunSummary.to_json``; the sweep's results read it back with
``read_run_summary`` (``toolkit.profile.results``). The rest of the file is the report's
own (its page and ``rtk report --json`` show it), not read by other packages.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from toolkit.json_types import JsonObject
from toolkit.rundir.record_base import Record, check_version, read_object, record_fields

SCHEMA_VERSION = 1  # of summary.json


@dataclass(frozen=True)
class RunSummary(Record):
    """The run as a whole, as the report figured it (``summary.json``'s ``run``).

    Step and token figures are None without markers; any figure is None where the
    report's value was not finite (summary.json is strict JSON).

    Attributes:
        duration_s: The report's window.
        energy_j: All nodes' energy over the window.
        steps: Optimizer steps (each counted once, latest attempt).
        tokens: Tokens trained on.
        energy_per_step_j: ``energy_j / steps``.
        energy_per_token_j: ``energy_j / tokens``.
        tokens_per_s: ``tokens / duration_s``.
        tokens_per_j: ``tokens / energy_j``.
        partial: Whether some node or device misses part of the window.
        restarts: Resumed attempts.
        ranks: Ranks that wrote markers.
        compile_s: Seconds the trainer's steps spent compiling (None: eager, or not
            a training run).
    """

    duration_s: float | None
    energy_j: float | None
    steps: int | None
    tokens: int | None
    energy_per_step_j: float | None
    energy_per_token_j: float | None
    tokens_per_s: float | None
    tokens_per_j: float | None
    partial: bool
    restarts: int
    ranks: int
    compile_s: float | None = None

    @property
    def energy_wh(self) -> float | None:
        """``energy_j`` in watt-hours."""
        return None if self.energy_j is None else self.energy_j / 3600.0

    def to_json(self) -> JsonObject:
        """The section as written (``energy_wh`` after ``energy_j``)."""
        return {
            "duration_s": self.duration_s,
            "energy_j": self.energy_j,
            "energy_wh": self.energy_wh,
            "steps": self.steps,
            "tokens": self.tokens,
            "energy_per_step_j": self.energy_per_step_j,
            "energy_per_token_j": self.energy_per_token_j,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_j": self.tokens_per_j,
            "partial": self.partial,
            "restarts": self.restarts,
            "ranks": self.ranks,
            "compile_s": self.compile_s,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "summary.json: run") -> RunSummary:
        """The inverse of ``to_json`` (``energy_wh`` is derived, not read)."""
        f = record_fields(data, where)
        return cls(
            duration_s=f.number_or_none("duration_s"),
            energy_j=f.number_or_none("energy_j"),
            steps=f.integer_or_none("steps"),
            tokens=f.integer_or_none("tokens"),
            energy_per_step_j=f.number_or_none("energy_per_step_j"),
            energy_per_token_j=f.number_or_none("energy_per_token_j"),
            tokens_per_s=f.number_or_none("tokens_per_s"),
            tokens_per_j=f.number_or_none("tokens_per_j"),
            partial=f.flag("partial"),
            restarts=f.integer("restarts"),
            ranks=f.integer("ranks"),
            compile_s=f.number_or_none("compile_s"),
        )


def read_run_summary(path: Path) -> RunSummary:
    """The ``run`` section of the ``summary.json`` at ``path``.

    Raises:
        toolkit.errors.RunDirError: The file is unreadable, of another version, has no
            ``run`` object, or a field of it is wrong (the message names the file and
            the field).
    """
    f = record_fields(read_object(path), str(path))
    check_version(f, SCHEMA_VERSION)
    return RunSummary.from_json(f.obj("run"), f"{path}: run")
