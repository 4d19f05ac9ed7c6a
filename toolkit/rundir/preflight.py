"""The preflight record (``preflight.json``): every check's outcome, one status.

With the checks come the nodes a run could go on without (``exclude``, what
``rtk up --exclude-file`` reads), the links no node explains (``links``), and the
nodes ``rtk up`` left out before the checks ran (``excluded``). Records written before
these keys existed read with them empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from toolkit.fields import Fields
from toolkit.rundir.record import Record, record_fields

Status = Literal["pass", "warn", "fail"]
STATUSES: tuple[Status, ...] = ("pass", "warn", "fail")
R = TypeVar("R", bound=Record)


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
class Exclusion(Record):
    """A node to go on without, and why.

    Attributes:
        node: The node's inventory name.
        reasons: Why, each ``check-name: measured`` (or where the exclusion was asked for).
        head: True when the node is the inventory's head: never left out silently, the
            inventory must name another head first.
    """

    node: str
    reasons: tuple[str, ...]
    head: bool = False

    def to_json(self) -> dict[str, Any]:
        """The exclusion as written."""
        return {"node": self.node, "reasons": list(self.reasons), "head": self.head}

    @classmethod
    def from_json(cls, data: object, where: str = "exclusion") -> Exclusion:
        """The inverse of ``to_json`` (``head`` absent reads as false)."""
        f = record_fields(data, where)
        return cls(f.text("node"), f.texts("reasons"), bool(f.flag_or_none("head")))

    def describe(self) -> str:
        """``node3 (host.dev_shm: 64 MiB; gpu.count: 7)``, as plans and reports show it."""
        return f"{self.node} ({'; '.join(self.reasons)})" if self.reasons else self.node


@dataclass(frozen=True)
class BadLink(Record):
    """A pair of nodes whose checks failed while neither node is to blame for all of its pairs.

    A link (a cable, a switch port, a route) is not something a run can leave out, so
    it is named apart from the exclusions.

    Attributes:
        pair: ``source->target``, as the pair's checks are scoped.
        reasons: Each failed check of the pair, ``check-name: measured``.
    """

    pair: str
    reasons: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The link as written."""
        return {"pair": self.pair, "reasons": list(self.reasons)}

    @classmethod
    def from_json(cls, data: object, where: str = "link") -> BadLink:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        return cls(f.text("pair"), f.texts("reasons"))


def _records(f: Fields, key: str, kind: type[R], where: str) -> tuple[R, ...]:
    """The list of records at ``key``; empty when the key is missing (older files)."""
    items = f.data.get(key)
    if items is None:
        return ()
    if not isinstance(items, list):
        raise f.fail(key, "a list")
    return tuple(kind.from_json(item, f"{where}: {key}[{i}]") for i, item in enumerate(items))


@dataclass(frozen=True)
class PreflightRecord(Record):
    """A preflight run as saved (``preflight.json``, ``rtk preflight --json``).

    Attributes:
        cluster: The inventory's name.
        status: The worst status of any check.
        duration_s: How long the checks took (rounded to the millisecond).
        checks: Every check.
        head: The head node's name ('' when not known).
        exclude: The nodes the checks say to go on without (the head among them only
            with ``head`` set): derived from ``checks``.
        links: Failed pairs that name no node to exclude.
        excluded: The nodes left out before the checks ran (``rtk up --exclude``).
    """

    cluster: str
    status: Status
    duration_s: float
    checks: tuple[Check, ...]
    head: str = ""
    exclude: tuple[Exclusion, ...] = ()
    links: tuple[BadLink, ...] = ()
    excluded: tuple[Exclusion, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The record as written (``exclude``, ``links`` and ``excluded`` always there)."""
        return {
            "cluster": self.cluster,
            "status": self.status,
            "duration_s": self.duration_s,
            "head": self.head,
            "exclude": [e.to_json() for e in self.exclude],
            "links": [link.to_json() for link in self.links],
            "excluded": [e.to_json() for e in self.excluded],
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
            head=f.text_or_none("head") or "",
            exclude=_records(f, "exclude", Exclusion, where),
            links=_records(f, "links", BadLink, where),
            excluded=_records(f, "excluded", Exclusion, where),
        )
