"""Preflight results: every check, per node, per pair or the cluster's, with one exit status.

The terminal gets a summary that fits a screen at any node count (``terminal_summary``);
``verbose`` gives a line per check, and the JSON record every check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toolkit.json_types import JsonObject
from toolkit.preflight.exclusions import bad_links, exclusions
from toolkit.preflight.terminal_summary import MAX_LINES, failed_nodes, summary_lines
from toolkit.rundir.preflight import Check, Exclusion, PreflightRecord, ReachRecord, Status

__all__ = ["ORDER", "Check", "PreflightReport", "Status"]

ORDER: dict[str, int] = {"pass": 0, "warn": 1, "fail": 2}
EXCLUDED_CHARS = 200  # the line naming the nodes left out is cut past this


@dataclass
class PreflightReport:
    """Every check of one preflight run.

    Attributes:
        cluster: The inventory's name.
        checks: Every check.
        duration_s: How long the checks took.
        head: The head's name ('' when not known): an exclusion of it is marked.
        excluded: The nodes left out before the checks ran (``rtk up --exclude``).
        reach: Ray-port reachability per node and port, failures pair by pair,
            bounded (None: no port was checked).
    """

    cluster: str
    checks: list[Check] = field(default_factory=list)
    duration_s: float = 0.0
    head: str = ""
    excluded: list[Exclusion] = field(default_factory=list)
    reach: ReachRecord | None = None

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

    def failed_nodes(self) -> list[str]:
        """The nodes that failed a check of their own (not a pair's), in check order.

        The nodes a run could go on without: what ``rtk up --exclude`` would leave out.
        """
        return failed_nodes(self.checks)

    def exclusions(self) -> list[Exclusion]:
        """The nodes to go on without and why (``toolkit.preflight.exclusions``)."""
        return exclusions(self.checks, self.head or None)

    def to_record(self) -> PreflightRecord:
        """The record saved as ``preflight.json`` and printed by ``--json``."""
        exclude = self.exclusions()
        return PreflightRecord(
            self.cluster,
            self.status,
            round(self.duration_s, 3),
            tuple(self.checks),
            head=self.head,
            exclude=tuple(exclude),
            links=tuple(bad_links(self.checks, [e.node for e in exclude])),
            excluded=tuple(self.excluded),
            reach=self.reach,
        )

    @classmethod
    def from_record(cls, record: PreflightRecord) -> PreflightReport:
        """The report a saved record describes (its exclusions derive from the checks)."""
        return cls(
            record.cluster,
            list(record.checks),
            record.duration_s,
            record.head,
            list(record.excluded),
            record.reach,
        )

    def to_json(self) -> JsonObject:
        """A JSON-ready dict (``--json``, ``preflight.json``)."""
        return self.to_record().to_json()

    def render(self, only_problems: bool = False, verbose: bool = False) -> str:
        """The report for the terminal, within ``terminal_summary.MAX_LINES`` lines at any size.

        Checks by family with their counts, then what failed or warned, alike problems
        on one line, then the next step when something failed. ``only_problems`` leaves
        out the counts by family (``rtk up`` shows it this way); ``verbose`` prints every
        check as a line instead (``rtk preflight --verbose``).
        """
        heading = f"preflight of {self.cluster}: {self.status.upper()} in {self.duration_s:.1f} s"
        if self.excluded:
            left_out = "; ".join(e.describe() for e in self.excluded)
            if len(left_out) > EXCLUDED_CHARS:
                left_out = left_out[: EXCLUDED_CHARS - 3] + "..."
            heading += f"\n  run without {left_out}"
        if verbose:
            return self._every_line(heading, only_problems)
        lines = summary_lines(self.checks, only_problems, MAX_LINES - heading.count("\n") - 1)
        return "\n".join([heading, *lines]) + "\n"

    def _every_line(self, heading: str, only_problems: bool) -> str:
        """A line per check: failures and warnings first (alike ones share a line)."""
        lines = [heading]
        # Problems that read the same on several nodes (one limit everywhere) share a line.
        groups: dict[tuple[str, str, str, str, str], list[Check]] = {}
        for c in sorted(self.checks, key=lambda c: (-ORDER[c.status], c.name)):
            if only_problems and c.status == "pass":
                continue
            same = c.scope if c.status == "pass" else ""
            groups.setdefault((c.status, c.name, c.measured, c.threshold, c.hint + same), [])
            groups[(c.status, c.name, c.measured, c.threshold, c.hint + same)].append(c)
        for alike in groups.values():
            first = alike[0]
            scopes = ",".join(c.scope for c in alike)
            line = f"  {first.status.upper():4}  {first.name:24} {scopes:18} {first.measured}"
            if first.threshold and first.status != "pass":
                line += f" (want {first.threshold})"
            lines.append(line)
            if first.hint and first.status != "pass":
                lines.append(f"        hint: {first.hint}")
        counts = {s: sum(c.status == s for c in self.checks) for s in ORDER}
        lines.append(f"  {counts['pass']} passed, {counts['warn']} warned, {counts['fail']} failed")
        return "\n".join(lines) + "\n"
