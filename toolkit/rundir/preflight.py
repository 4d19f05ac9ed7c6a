"""The preflight record (``preflight.json``): every check's outcome, one status.

With the checks come the nodes a run could go on without (``exclude``, what
``rtk up --exclude-file`` reads), the links no node explains (``links``), the
nodes ``rtk up`` left out before the checks ran (``excluded``), and the Ray ports' reach
per node and port (``reach``). Records written before these keys existed read with
them empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from toolkit.fields import Fields
from toolkit.json_types import JsonObject
from toolkit.rundir.record_base import Record, record_fields

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

    def to_json(self) -> JsonObject:
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

    def to_json(self) -> JsonObject:
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

    def to_json(self) -> JsonObject:
        """The link as written."""
        return {"pair": self.pair, "reasons": list(self.reasons)}

    @classmethod
    def from_json(cls, data: object, where: str = "link") -> BadLink:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        return cls(f.text("pair"), f.texts("reasons"))


@dataclass(frozen=True)
class PortFailures(Record):
    """The testers that failed to reach one node's Ray port.

    Attributes:
        dst: The node whose port it is.
        port: The port's name (``node_manager``).
        tried: How many testers tried it.
        reached: How many reached it.
        sources: The testers that failed, at most ``SOURCES_KEPT`` of them.
        sources_more: How many more failed, not named.
        errors: What the failures said -> how many said it.
    """

    dst: str
    port: str
    tried: int
    reached: int
    sources: tuple[str, ...]
    sources_more: int = 0
    errors: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        """The entry as written."""
        return {
            "dst": self.dst,
            "port": self.port,
            "tried": self.tried,
            "reached": self.reached,
            "sources": list(self.sources),
            "sources_more": self.sources_more,
            "errors": dict(self.errors),
        }

    @classmethod
    def from_json(cls, data: object, where: str = "failure") -> PortFailures:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        errors = f.nested("errors")
        return cls(
            f.text("dst"),
            f.text("port"),
            f.integer("tried"),
            f.integer("reached"),
            f.texts("sources"),
            f.integer_or_none("sources_more") or 0,
            {k: errors.integer(k) for k in errors.data},
        )


@dataclass(frozen=True)
class ReachRecord(Record):
    """Ray-port reachability between nodes, bounded whatever the node count.

    Which pairs were tried is the peer plan's (``mode``, ``seed``); per port, how many
    connections were tried and made; per node and port that some tester failed to
    reach, who failed and how.

    Attributes:
        mode: How peers were chosen: ``all``, ``ring`` or ``ring+K``.
        seed: The seed of the random peers.
        testers_min: The fewest testers any node up had.
        pairs: (source, target) pairs tried.
        ports: Port name -> (connections tried, made).
        failures: Per node and port some tester failed to reach, in node order; at
            most ``FAILURES_KEPT`` entries.
        failures_more: How many such entries were left out.
    """

    mode: str
    seed: int
    testers_min: int
    pairs: int
    ports: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    failures: tuple[PortFailures, ...] = ()
    failures_more: int = 0

    def to_json(self) -> JsonObject:
        """The record as written."""
        return {
            "mode": self.mode,
            "seed": self.seed,
            "testers_min": self.testers_min,
            "pairs": self.pairs,
            "ports": {k: {"tried": t, "reached": r} for k, (t, r) in self.ports.items()},
            "failures": [f.to_json() for f in self.failures],
            "failures_more": self.failures_more,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "reach") -> ReachRecord:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        ports = f.children("ports")
        failures = f.data.get("failures")
        if not isinstance(failures, list):
            raise f.fail("failures", "a list")
        return cls(
            f.text("mode"),
            f.integer("seed"),
            f.integer("testers_min"),
            f.integer("pairs"),
            {k: (p.integer("tried"), p.integer("reached")) for k, p in ports.items()},
            tuple(
                PortFailures.from_json(x, f"{where}: failures[{i}]") for i, x in enumerate(failures)
            ),
            f.integer_or_none("failures_more") or 0,
        )


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
        reach: Ray-port reachability per node and port (None: not checked, or a
            record written before it was kept).
    """

    cluster: str
    status: Status
    duration_s: float
    checks: tuple[Check, ...]
    head: str = ""
    exclude: tuple[Exclusion, ...] = ()
    links: tuple[BadLink, ...] = ()
    excluded: tuple[Exclusion, ...] = ()
    reach: ReachRecord | None = None

    def to_json(self) -> JsonObject:
        """The record as written (``exclude``, ``links`` and ``excluded`` always there)."""
        return {
            "cluster": self.cluster,
            "status": self.status,
            "duration_s": self.duration_s,
            "head": self.head,
            "exclude": [e.to_json() for e in self.exclude],
            "links": [link.to_json() for link in self.links],
            "excluded": [e.to_json() for e in self.excluded],
            "reach": None if self.reach is None else self.reach.to_json(),
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
            reach=None
            if f.data.get("reach") is None
            else ReachRecord.from_json(f.data["reach"], f"{where}: reach"),
        )
