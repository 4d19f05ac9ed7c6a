"""What the bandwidth job answers: the TCP ring's pairs, the all-reduce sweep, localisation.

``toolkit.preflight.bandwidth.job`` writes it (``BandwidthResult.to_json``) on its last
line, after ``measure.RESULT_PREFIX``; the host reads it back once with
``BandwidthResult.from_json`` and grades it by attribute
(``toolkit.preflight.checks.bandwidth_checks``). The all-reduce's sizes are the load
job's ``SweepPoint``: the same measurement (``measure.allreduce_sweep``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from toolkit.fields import Fields
from toolkit.json_types import JsonObject
from toolkit.preflight.bandwidth.localise_section import LocaliseSection
from toolkit.preflight.bandwidth.measure import TcpSendResult
from toolkit.preflight.load.job_result import SweepPoint
from toolkit.rundir.record_base import record_fields

PLATEAU_FRACTION = 0.9  # busbw within 10% of the best has reached its plateau


@dataclass(frozen=True)
class TcpPair:
    """One pair of the ring: ``src`` sent to ``dst``; the best of its attempts.

    Attributes:
        src: The sending node.
        dst: The receiving node.
        attempts: How many times it was measured.
        gbit_s: The delivered rate (None: it failed).
        error: Why it failed (None when it did not).
        sent_bytes: What was delivered.
        seconds: How long the test took.
    """

    src: str
    dst: str
    attempts: int = 1
    gbit_s: float | None = None
    error: str | None = None
    sent_bytes: int | None = None
    seconds: float | None = None

    @classmethod
    def measured(cls, src: str, dst: str, sent: TcpSendResult, attempts: int = 1) -> TcpPair:
        """The pair from ``measure.tcp_send``'s answer (its rate, or why it failed)."""
        error = None if sent.gbit_s is not None else (sent.error or "no answer")
        return cls(src, dst, attempts, sent.gbit_s, error, sent.sent_bytes, sent.seconds)

    @property
    def key(self) -> tuple[str, str]:
        """``(src, dst)``."""
        return self.src, self.dst

    def to_json(self) -> JsonObject:
        """As written in the job's result (what was not measured left out)."""
        # The measured part is written as a stream's: one owner of those keys.
        stream = TcpSendResult(
            seconds=self.seconds, sent_bytes=self.sent_bytes, gbit_s=self.gbit_s, error=self.error
        )
        return {"src": self.src, "dst": self.dst, "attempts": self.attempts, **stream.to_json()}

    @classmethod
    def from_fields(cls, f: Fields) -> TcpPair:
        """The inverse of ``to_json``."""
        return cls(
            src=f.text("src"),
            dst=f.text("dst"),
            attempts=f.integer_or_none("attempts") or 1,
            gbit_s=f.number_or_none("gbit_s"),
            error=f.text_or_none("error"),
            sent_bytes=f.integer_or_none("bytes"),
            seconds=f.number_or_none("seconds"),
        )


@dataclass(frozen=True)
class Plateau:
    """Where busbw plateaus: the smallest size within 10% of the best busbw.

    Attributes:
        size_bytes: That size.
        busbw_gb_s: Its busbw.
        best_gb_s: The best busbw of the sweep.
    """

    size_bytes: int
    busbw_gb_s: float
    best_gb_s: float

    def to_json(self) -> JsonObject:
        """As written in the job's result."""
        return {
            "bytes": self.size_bytes,
            "busbw_gb_s": self.busbw_gb_s,
            "best_gb_s": self.best_gb_s,
        }


def plateau(sizes: Sequence[SweepPoint]) -> Plateau | None:
    """Where the sweep's busbw plateaus; None for no sizes."""
    if not sizes:
        return None
    best = max(s.busbw_gb_s for s in sizes)
    first = min(
        (s for s in sizes if s.busbw_gb_s >= PLATEAU_FRACTION * best), key=lambda s: s.size_bytes
    )
    return Plateau(first.size_bytes, first.busbw_gb_s, best)


@dataclass(frozen=True)
class AllreduceResult:
    """The all-reduce sweep over every rank (one per GPU, or per node with gloo).

    Attributes:
        backend: ``nccl`` or ``gloo``.
        ranks: How many ranks took part.
        floor_gb_s: The busbw below which it is bad (the threshold or the hardware's).
        expected_min_gb_s: The least the hardware should reach, where the job was told.
        sizes: Per size, the figures (empty when it failed).
        attempts: How many times it ran (0: never, fewer than 2 ranks).
        error: Why it failed (None when it did not).
    """

    backend: str
    ranks: int
    floor_gb_s: float = 0.0
    expected_min_gb_s: float | None = None
    sizes: tuple[SweepPoint, ...] = ()
    attempts: int = 0
    error: str | None = None

    @property
    def largest(self) -> SweepPoint | None:
        """The largest size measured, which is graded; None when none was."""
        return max(self.sizes, key=lambda s: s.size_bytes) if self.sizes else None

    @property
    def plateau(self) -> Plateau | None:
        """Where busbw plateaus (``plateau``)."""
        return plateau(self.sizes)

    @property
    def failed(self) -> bool:
        """It failed, or measured nothing."""
        return self.error is not None or not self.sizes

    def to_json(self) -> JsonObject:
        """As written in the job's result."""
        out: JsonObject = {
            "backend": self.backend,
            "ranks": self.ranks,
            "floor_gb_s": self.floor_gb_s,
        }
        if self.expected_min_gb_s is not None:
            out["expected_min_gb_s"] = self.expected_min_gb_s
        if self.error is not None:
            out["error"] = self.error
        if self.sizes:
            flat = self.plateau
            out["sizes"] = [s.to_json() for s in self.sizes]
            out["plateau"] = None if flat is None else flat.to_json()
        if self.attempts:
            out["attempts"] = self.attempts
        return out

    @classmethod
    def from_fields(cls, f: Fields) -> AllreduceResult:
        """The inverse of ``to_json`` (the plateau is derived from the sizes)."""
        sizes = f.data.get("sizes") or []
        if not isinstance(sizes, list):
            raise f.fail("sizes", "a list")
        return cls(
            backend=f.text("backend"),
            ranks=f.integer("ranks"),
            floor_gb_s=f.number_or_none("floor_gb_s") or 0.0,
            expected_min_gb_s=f.number_or_none("expected_min_gb_s"),
            sizes=tuple(
                SweepPoint.from_fields(Fields(s, f.errors, (*f.path, "sizes", i)))
                for i, s in enumerate(sizes)
            ),
            attempts=f.integer_or_none("attempts") or 0,
            error=f.text_or_none("error"),
        )


@dataclass(frozen=True)
class BandwidthResult:
    """The whole job's answer.

    Attributes:
        nodes: The inventory's nodes alive in Ray, measured.
        missing: Inventory nodes not alive in Ray: not measured.
        tcp: The ring's pairs, in ring order.
        allreduce: The all-reduce sweep (None: not run).
        localise: Per test kind (``tcp``, ``allreduce``), what localisation found
            (graded by ``toolkit.preflight.localise.culprit_checks``).
    """

    nodes: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    tcp: tuple[TcpPair, ...] = ()
    allreduce: AllreduceResult | None = None
    localise: Mapping[str, LocaliseSection] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        """The result as the job prints it."""
        return {
            "nodes": list(self.nodes),
            "missing": list(self.missing),
            "localise": {kind: found.to_json() for kind, found in self.localise.items()},
            "tcp": [pair.to_json() for pair in self.tcp],
            "allreduce": None if self.allreduce is None else self.allreduce.to_json(),
        }

    @classmethod
    def from_json(cls, data: object, where: str = "bandwidth job result") -> BandwidthResult:
        """The inverse of ``to_json``.

        Raises:
            RunDirError: A field is missing or of the wrong type; the error names it.
        """
        f = record_fields(data, where)
        tcp = f.data.get("tcp") or []
        if not isinstance(tcp, list):
            raise f.fail("tcp", "a list")
        reduce = f.nested_or_none("allreduce")
        return cls(
            nodes=f.texts("nodes"),
            missing=f.texts("missing"),
            tcp=tuple(
                TcpPair.from_fields(Fields(p, f.errors, ("tcp", i))) for i, p in enumerate(tcp)
            ),
            allreduce=None if reduce is None else AllreduceResult.from_fields(reduce),
            localise={
                kind: LocaliseSection.from_fields(found)
                for kind, found in f.children("localise").items()
            },
        )
