"""What the per-node load job answers: per node its load test and intra-node all-reduce.

``toolkit.preflight.load.job`` writes it (``LoadResult.to_json``) on its last line,
after ``RESULT_PREFIX``; the host reads it back with ``LoadResult.from_json`` and
grades it (``toolkit.preflight.load.intra_checks``). A node whose test failed carries the
error instead of the figures: one node's failure never hides the others' results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from toolkit.fields import Fields
from toolkit.json_types import JsonObject
from toolkit.preflight.load.node import NodeLoad
from toolkit.rundir.record_base import record_fields

RESULT_PREFIX = "rtk-load: "  # the job's last line: this, then the result as JSON
PROGRESS_PREFIX = "rtk load: "  # the job's progress lines, shown to the user


@dataclass(frozen=True)
class SweepPoint:
    """One all-reduce size: the slowest rank's time per all-reduce and the rates."""

    size_bytes: int
    seconds: float
    algbw_gb_s: float
    busbw_gb_s: float

    def to_json(self) -> JsonObject:
        """As ``measure.allreduce_sweep`` writes it."""
        return {
            "bytes": self.size_bytes,
            "seconds": self.seconds,
            "algbw_gb_s": self.algbw_gb_s,
            "busbw_gb_s": self.busbw_gb_s,
        }

    @classmethod
    def from_fields(cls, f: Fields) -> SweepPoint:
        """The inverse of ``to_json``."""
        return cls(
            f.integer("bytes"), f.number("seconds"), f.number("algbw_gb_s"), f.number("busbw_gb_s")
        )


@dataclass(frozen=True)
class IntraAllReduce:
    """An all-reduce sweep over one node's own ranks.

    Attributes:
        backend: ``nccl`` (one rank per GPU) or ``gloo`` (CPU ranks).
        ranks: How many ranks took part.
        sizes: Per size, the figures (empty when it failed or was skipped).
        error: Why it failed ("" when it did not).
        skipped: Why it did not run (one GPU: nothing to reduce across).
    """

    backend: str
    ranks: int
    sizes: tuple[SweepPoint, ...] = ()
    error: str = ""
    skipped: str = ""

    @property
    def best(self) -> SweepPoint | None:
        """The size with the highest bus bandwidth; None when nothing was measured."""
        return max(self.sizes, key=lambda p: p.busbw_gb_s) if self.sizes else None

    def to_json(self) -> JsonObject:
        """As written in the job's result."""
        return {
            "backend": self.backend,
            "ranks": self.ranks,
            "sizes": [p.to_json() for p in self.sizes],
            "error": self.error,
            "skipped": self.skipped,
        }

    @classmethod
    def from_fields(cls, f: Fields) -> IntraAllReduce:
        """The inverse of ``to_json``."""
        sizes = f.data.get("sizes") or []
        if not isinstance(sizes, list):
            raise f.fail("sizes", "a list")
        return cls(
            backend=f.text("backend"),
            ranks=f.integer("ranks"),
            sizes=tuple(
                SweepPoint.from_fields(Fields(s, f.errors, (*f.path, "sizes", str(i))))
                for i, s in enumerate(sizes)
            ),
            error=f.text_or_none("error") or "",
            skipped=f.text_or_none("skipped") or "",
        )


@dataclass(frozen=True)
class NodeResult:
    """One node's answer: its load test or why it failed, and its intra-node all-reduce."""

    load: NodeLoad | None = None
    load_error: str = ""
    intra: IntraAllReduce | None = None

    def to_json(self) -> JsonObject:
        """As written in the job's result."""
        return {
            "load": self.load.to_json() if self.load else None,
            "load_error": self.load_error,
            "intra": self.intra.to_json() if self.intra else None,
        }


@dataclass(frozen=True)
class LoadResult:
    """The whole job's answer.

    Attributes:
        nodes: Inventory node name -> its answer, for every node alive in Ray.
        missing: Inventory nodes not alive in Ray: not tested.
    """

    nodes: Mapping[str, NodeResult] = field(default_factory=dict)
    missing: tuple[str, ...] = ()

    def to_json(self) -> JsonObject:
        """The result as the job prints it."""
        return {
            "nodes": {name: r.to_json() for name, r in self.nodes.items()},
            "missing": list(self.missing),
        }

    @classmethod
    def from_json(cls, data: object, where: str = "load job result") -> LoadResult:
        """The inverse of ``to_json``.

        Raises:
            RunDirError: A field is missing or of the wrong type; the error names it.
        """
        f = record_fields(data, where)
        nodes = {}
        for name, node in f.children("nodes").items():
            load = node.data.get("load")
            intra = node.nested_or_none("intra")
            nodes[name] = NodeResult(
                load=NodeLoad.from_json(load, f"{where}: nodes.{name}.load") if load else None,
                load_error=node.text_or_none("load_error") or "",
                intra=IntraAllReduce.from_fields(intra) if intra is not None else None,
            )
        return cls(nodes, f.texts("missing"))
