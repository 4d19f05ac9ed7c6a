"""Preflight results: one line per check, per node or per pair, with one exit status."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["pass", "warn", "fail"]
ORDER: dict[str, int] = {"pass": 0, "warn": 1, "fail": 2}


@dataclass(frozen=True)
class Check:
    """One check's outcome on one node, pair or the whole cluster.

    Attributes:
        name: What was checked (``host.dev_shm``, ``software.ray``, ...).
        scope: A node name, ``a->b`` for a pair, or ``cluster``.
        status: pass, warn or fail.
        measured: What was found, as shown to the user.
        threshold: What counts as good.
        hint: How to fix it (empty when it passed).
    """

    name: str
    scope: str
    status: Status
    measured: str
    threshold: str = ""
    hint: str = ""


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

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``--json``, ``preflight.json``)."""
        return {
            "cluster": self.cluster,
            "status": self.status,
            "duration_s": round(self.duration_s, 3),
            "checks": [asdict(c) for c in self.checks],
        }

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
