"""What localisation found, per test kind, as the bandwidth job's result carries it.

The job (``job``) localises a bad TCP ring or all-reduce and keeps what was found as a
``LocaliseSection`` (built by ``localise.localisation_section``), with every test its
probe ran (``probes``): the TCP streams (``pairs``) or the all-reduce groups
(``groups``). ``BandwidthResult`` writes it under ``localise`` and reads it back on the
host, where ``toolkit.preflight.localise.culprit_checks`` and
``toolkit.preflight.checks.cleared_pairs`` grade it.

Fields a section may lack read as empty, as the checks have always taken them; a
field of the wrong type is an error that names it.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.fields import Fields
from toolkit.json_types import JsonObject
from toolkit.preflight.bandwidth.measure import TcpSendResult


@dataclass(frozen=True)
class ShownReading:
    """One test localisation judged, as the section shows it.

    Attributes:
        round: The round it ran in (0: the measurements localisation started from).
        group: The nodes tested together.
        role: Why the search ran it (``whole``, ``part``, ``single``, ...).
        value: Its value, rounded to 4 places (None: it failed).
        bad: Whether it was bad (None: it could not be judged).
        error: Why it failed ("" when it did not).
    """

    round: int
    group: tuple[str, ...]
    role: str
    value: float | None
    bad: bool | None
    error: str = ""

    def to_json(self) -> JsonObject:
        """As written in the section (no ``error`` when there was none)."""
        out: JsonObject = {
            "round": self.round,
            "group": list(self.group),
            "role": self.role,
            "value": self.value,
        }
        if self.error:
            out["error"] = self.error
        out["bad"] = self.bad
        return out

    @classmethod
    def from_fields(cls, f: Fields) -> ShownReading:
        """The inverse of ``to_json``."""
        return cls(
            round=f.integer_or_none("round") or 0,
            group=f.texts("group"),
            role=f.text_or_none("role") or "",
            value=f.number_or_none("value"),
            bad=f.flag_or_none("bad"),
            error=f.text_or_none("error") or "",
        )


@dataclass(frozen=True)
class ShownCulprit:
    """A node or link localisation blamed.

    Attributes:
        kind: ``node`` or ``link``.
        nodes: The node, or the link's two ends.
        summary: The words a check shows ("" when the section has none).
        evidence: The readings that convicted it.
    """

    kind: str
    nodes: tuple[str, ...]
    summary: str = ""
    evidence: tuple[ShownReading, ...] = ()

    def to_json(self) -> JsonObject:
        """As written in the section."""
        return {
            "kind": self.kind,
            "nodes": list(self.nodes),
            "summary": self.summary,
            "evidence": [r.to_json() for r in self.evidence],
        }

    @classmethod
    def from_fields(cls, f: Fields) -> ShownCulprit:
        """The inverse of ``to_json``."""
        return cls(
            kind=f.text_or_none("kind") or "node",
            nodes=f.texts("nodes", required=True),
            summary=f.text_or_none("summary") or "",
            evidence=tuple(ShownReading.from_fields(r) for r in f.objects("evidence")),
        )


@dataclass(frozen=True)
class ShownFlake:
    """Nodes bad once, then good when measured again.

    Attributes:
        nodes: The group that was bad once.
        evidence: Its readings.
    """

    nodes: tuple[str, ...]
    evidence: tuple[ShownReading, ...] = ()

    def to_json(self) -> JsonObject:
        """As written in the section."""
        return {"nodes": list(self.nodes), "evidence": [r.to_json() for r in self.evidence]}

    @classmethod
    def from_fields(cls, f: Fields) -> ShownFlake:
        """The inverse of ``to_json``."""
        return cls(
            nodes=f.texts("nodes", required=True),
            evidence=tuple(ShownReading.from_fields(r) for r in f.objects("evidence")),
        )


@dataclass(frozen=True)
class TcpTest:
    """One stream a TCP probe ran: ``src`` sent to ``dst`` in round ``round``.

    Attributes:
        round: The probe's round.
        src: The sending node.
        dst: The receiving node.
        sent: What the send measured, or why it failed.
    """

    round: int
    src: str
    dst: str
    sent: TcpSendResult

    def to_json(self) -> JsonObject:
        """As written in the section: the round, the ends, then what was measured."""
        return {"round": self.round, "src": self.src, "dst": self.dst, **self.sent.to_json()}

    @classmethod
    def from_fields(cls, f: Fields) -> TcpTest:
        """The inverse of ``to_json``."""
        sent = TcpSendResult(
            seconds=f.number_or_none("seconds"),
            sent_bytes=f.integer_or_none("bytes"),
            gbit_s=f.number_or_none("gbit_s"),
            error=f.text_or_none("error"),
        )
        return cls(f.integer("round"), f.text("src"), f.text("dst"), sent)


@dataclass(frozen=True)
class GroupTest:
    """One all-reduce an all-reduce probe ran on a group of nodes.

    Attributes:
        round: The probe's round.
        nodes: The group.
        busbw_gb_s: Its bus bandwidth (None: it failed).
        error: Why it failed (None when it did not).
    """

    round: int
    nodes: tuple[str, ...]
    busbw_gb_s: float | None = None
    error: str | None = None

    def to_json(self) -> JsonObject:
        """As written in the section: ``error`` when it failed, else ``busbw_gb_s``."""
        shown: JsonObject = (
            {"error": self.error} if self.error is not None else {"busbw_gb_s": self.busbw_gb_s}
        )
        return {"round": self.round, "nodes": list(self.nodes), **shown}

    @classmethod
    def from_fields(cls, f: Fields) -> GroupTest:
        """The inverse of ``to_json``."""
        return cls(
            f.integer("round"),
            f.texts("nodes", required=True),
            f.number_or_none("busbw_gb_s"),
            f.text_or_none("error"),
        )


@dataclass(frozen=True)
class LocaliseSection:
    """What one test kind's localisation found, or the error that stopped it.

    Attributes:
        conclusion: ``localised``, ``cluster-wide``, ``flaky`` or ``healthy``.
        unit: The unit of the values (``Gbit/s``, ``GB/s busbw``).
        rounds: How many rounds it ran.
        probes: How many tests it ran.
        node_count: How many nodes it searched (None: the section does not say).
        culprits: The nodes and links blamed.
        flakes: The groups bad once, then good.
        unresolved: The groups it could not narrow further.
        describe: What it found, in lines for the user.
        readings: Every test it judged.
        error: What stopped it (None: it ran to its end); the other fields are empty.
        pairs: The TCP probe's streams (None: not a TCP localisation).
        groups: The all-reduce probe's groups (None: not an all-reduce localisation).
    """

    conclusion: str = ""
    unit: str = ""
    rounds: int = 0
    probes: int = 0
    node_count: int | None = None
    culprits: tuple[ShownCulprit, ...] = ()
    flakes: tuple[ShownFlake, ...] = ()
    unresolved: tuple[tuple[str, ...], ...] = ()
    describe: tuple[str, ...] = ()
    readings: tuple[ShownReading, ...] = ()
    error: str | None = None
    pairs: tuple[TcpTest, ...] | None = None
    groups: tuple[GroupTest, ...] | None = None

    def to_json(self) -> JsonObject:
        """As written in the job's result: what was found (or the error), then the tests."""
        out: JsonObject
        if self.error is not None:
            out = {"error": self.error}
        else:
            out = {
                "conclusion": self.conclusion,
                "unit": self.unit,
                "rounds": self.rounds,
                "probes": self.probes,
                "nodes": self.node_count,
                "culprits": [c.to_json() for c in self.culprits],
                "flakes": [f.to_json() for f in self.flakes],
                "unresolved": [list(g) for g in self.unresolved],
                "describe": list(self.describe),
                "readings": [r.to_json() for r in self.readings],
            }
        if self.pairs is not None:
            out["pairs"] = [t.to_json() for t in self.pairs]
        if self.groups is not None:
            out["groups"] = [t.to_json() for t in self.groups]
        return out

    @classmethod
    def from_fields(cls, f: Fields) -> LocaliseSection:
        """The inverse of ``to_json``; a field it lacks reads as empty."""
        pairs = tuple(TcpTest.from_fields(t) for t in f.objects("pairs"))
        groups = tuple(GroupTest.from_fields(t) for t in f.objects("groups"))
        return cls(
            conclusion=f.text_or_none("conclusion") or "",
            unit=f.text_or_none("unit") or "",
            rounds=f.integer_or_none("rounds") or 0,
            probes=f.integer_or_none("probes") or 0,
            node_count=f.integer_or_none("nodes"),
            culprits=tuple(ShownCulprit.from_fields(c) for c in f.objects("culprits")),
            flakes=tuple(ShownFlake.from_fields(g) for g in f.objects("flakes")),
            unresolved=_groups(f, "unresolved"),
            describe=f.texts("describe"),
            readings=tuple(ShownReading.from_fields(r) for r in f.objects("readings")),
            error=f.text_or_none("error"),
            pairs=pairs if f.has("pairs") else None,
            groups=groups if f.has("groups") else None,
        )


def _groups(f: Fields, key: str) -> tuple[tuple[str, ...], ...]:
    """The list of groups (lists of node names) at ``key``; empty when null or missing."""
    values = f.data.get(key)
    if values is None:
        return ()
    if not isinstance(values, list):
        raise f.fail(key, "a list of lists of nodes")
    found = []
    for index, value in enumerate(values):
        if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
            raise f.errors.error((*f.path, key, index), "a list of nodes", value)
        found.append(tuple(str(n) for n in value))
    return tuple(found)
