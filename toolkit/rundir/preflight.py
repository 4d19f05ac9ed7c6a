"""The preflight record (``preflight.json``): every check's outcome, one status."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from toolkit.fields import Fields
from toolkit.rundir.record import Record, record_fields

Status = Literal["pass", "warn", "fail"]
STATUSES: tuple[Status, ...] = ("pass", "warn", "fail")


def _status(f: Fields, key: str) -> Status:
    value = f.text(key)
    if value not in STATUSES:
        raise f.fail(key, " or ".join(STATUSES))
    return value


@dataclass(frozen=True)
class Check(Record):
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

    def to_json(self) -> dict[str, Any]:
        """The check as written."""
        return {
            "name": self.name,
            "scope": self.scope,
            "status": self.status,
            "measured": self.measured,
            "threshold": self.threshold,
            "hint": self.hint,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "check") -> Check:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        return cls(
            name=f.text("name"),
            scope=f.text("scope"),
            status=_status(f, "status"),
            measured=f.text("measured"),
            threshold=f.text_or_none("threshold") or "",
            hint=f.text_or_none("hint") or "",
        )


@dataclass(frozen=True)
class PreflightRecord(Record):
    """A preflight run as saved (``preflight.json``, ``rtk preflight --json``).

    Attributes:
        cluster: The inventory's name.
        status: The worst status of any check.
        duration_s: How long the checks took (rounded to the millisecond).
        checks: Every check.
    """

    cluster: str
    status: Status
    duration_s: float
    checks: tuple[Check, ...]

    def to_json(self) -> dict[str, Any]:
        """The record as written."""
        return {
            "cluster": self.cluster,
            "status": self.status,
            "duration_s": self.duration_s,
            "checks": [c.to_json() for c in self.checks],
        }

    @classmethod
    def from_json(cls, data: object, where: str = "preflight.json") -> PreflightRecord:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        checks = f.data.get("checks")
        if not isinstance(checks, list):
            raise f.fail("checks", "a list")
        return cls(
            cluster=f.text("cluster"),
            status=_status(f, "status"),
            duration_s=f.number("duration_s"),
            checks=tuple(Check.from_json(c, f"{where}: checks[{i}]") for i, c in enumerate(checks)),
        )
