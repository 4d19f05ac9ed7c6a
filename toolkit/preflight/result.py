"""Preflight results: one line per check, per node or per pair, with one exit status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolkit.rundir.preflight import Check, PreflightRecord, Status

__all__ = ["ORDER", "Check", "PreflightReport", "Status"]

ORDER: dict[str, int] = {"pass": 0, "warn": 1, "fail": 2}


@dataclass
class PreflightReport:
    """Every check of one preflight run."""

    cluster: str
    checks: list[Check] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def status(self) -> Status:
        """The worst status of any check."""
        worst: Status = "pass"
        for check in self.checks:
            if ORDER[check.status] > ORDER[worst]:
                worst = check.status
        return worst

    @property
    def exit_code(self) -> int:
        """0 when nothing failed (warnings allowed), 1 otherwise."""
        return 1 if self.status == "fail" else 0

    def failed(self) -> list[Check]:
        """The checks that failed."""
        return [c for c in self.checks if c.status == "fail"]

    def to_record(self) -> PreflightRecord:
        """The record saved as ``preflight.json`` and printed by ``--json``."""
        return PreflightRecord(
            self.cluster, self.status, round(self.duration_s, 3), tuple(self.checks)
        )

    @classmethod
    def from_record(cls, record: PreflightRecord) -> PreflightReport:
        """The report a saved record describes."""
        return cls(record.cluster, list(record.checks), record.duration_s)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``--json``, ``preflight.json``)."""
        return self.to_record().to_json()

    def render(self, only_problems: bool = False) -> str:
        """A table for the terminal: failures and warnings first, then a count of passes.

        ``only_problems`` leaves out the passed checks (``rtk up`` shows it this way).
        """
        lines = [f"preflight of {self.cluster}: {self.status.upper()} in {self.duration_s:.1f} s"]
        # Problems that read the same on several nodes (one limit everywhere) share a line.
        groups: dict[tuple[str, str, str, str, str], list[str]] = {}
        for c in sorted(self.checks, key=lambda c: (-ORDER[c.status], c.name)):
            if only_problems and c.status == "pass":
                continue
            same = c.scope if c.status == "pass" else ""
            groups.setdefault((c.status, c.name, c.measured, c.threshold, c.hint + same), [])
            groups[(c.status, c.name, c.measured, c.threshold, c.hint + same)].append(c.scope)
        for (status, name, measured, threshold, _), scopes in groups.items():
            first = next(c for c in self.checks if c.name == name and c.scope == scopes[0])
            line = f"  {status.upper():4}  {name:24} {','.join(scopes):18} {measured}"
            if threshold and status != "pass":
                line += f" (want {threshold})"
            lines.append(line)
            if first.hint and status != "pass":
                lines.append(f"        hint: {first.hint}")
        counts = {s: sum(c.status == s for c in self.checks) for s in ORDER}
        lines.append(f"  {counts['pass']} passed, {counts['warn']} warned, {counts['fail']} failed")
        return "\n".join(lines) + "\n"
