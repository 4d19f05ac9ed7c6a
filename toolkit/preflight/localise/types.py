"""The records of localisation: what a probe answers, how it is judged, what is found.

``toolkit.preflight.localise.find`` is the entry point and re-exports these.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

Group = tuple[str, ...]
Role = Literal["given", "whole", "part", "single", "confirm", "cross", "reference", "pairing"]
Conclusion = Literal["localised", "cluster-wide", "flaky", "healthy"]
CulpritKind = Literal["node", "link"]

PEER_SIZE_RATIO = 2.0  # groups within this factor of each other's size are compared


@dataclass(frozen=True)
class Failed:
    """A group's test that did not complete: an error, a timeout, a closed port."""

    error: str


ProbeResult = float | bool | Failed
"""One group's result: a measured value, a pass (True) or fail (False), or a failure."""

Probe = Callable[[Sequence[Group]], Sequence[ProbeResult]]
"""Runs one round: the test on each of several disjoint groups at once, a result each."""


@dataclass(frozen=True)
class Verdict:
    """What counts as a bad result for a group.

    A failed test is always bad. A value is bad when it is worse than ``floor``, or
    worse than ``fraction`` of the median of the other groups measured in the same
    round whose size is within a factor of 2 of its own (the peers; a relative
    verdict measures a group of known-good nodes alongside as one, when it can).
    "Worse" is lower when ``higher_is_better`` (GB/s, Gbit/s), else higher (seconds:
    worse than ``median / fraction``).

    A relative verdict alone finds outliers: it cannot call the whole cluster slow,
    nor tell apart groups that are all equally bad (many bad nodes spread over the
    first parts). Give a ``floor`` too when the expected value is known.

    Attributes:
        floor: The absolute limit, in the probe's unit; None for none.
        fraction: The relative limit, in (0, 1]; None for none. With no ``floor``,
            a group measured without peers cannot be judged.
        higher_is_better: Whether larger values are better.
    """

    floor: float | None = None
    fraction: float | None = 0.8
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        if self.fraction is not None and not 0 < self.fraction <= 1:
            raise ValueError(f"Verdict.fraction must be in (0, 1], got {self.fraction!r}")
        if self.floor is not None and not math.isfinite(self.floor):
            raise ValueError(f"Verdict.floor must be a finite number, got {self.floor!r}")

    @classmethod
    def pass_fail(cls) -> Verdict:
        """Only a failed test (``False`` or ``Failed``) is bad: reachability."""
        return cls(floor=None, fraction=None)

    @property
    def judges_alone(self) -> bool:
        """Whether a group measured without peers can be judged."""
        return self.floor is not None or self.fraction is None

    def is_bad(self, value: float | None, peers: Sequence[float]) -> bool | None:
        """Whether ``value`` (None: the test failed) is bad; None when it cannot tell."""
        if value is None:
            return True
        if self.floor is not None and self._worse(value, self.floor):
            return True
        if self.fraction is not None and peers:
            median = statistics.median(peers)
            limit = median * self.fraction if self.higher_is_better else median / self.fraction
            return self._worse(value, limit)
        return False if self.judges_alone else None

    def _worse(self, value: float, limit: float) -> bool:
        return value < limit if self.higher_is_better else value > limit


@dataclass(frozen=True)
class LocaliseOptions:
    """How localisation searches.

    Attributes:
        retries: Bad measurements needed beyond the first before anything is blamed;
            a group that measured bad is measured again this many times when nothing
            smaller explains it.
        fanout: Parts a bad group is split into per round (2: halves). More parts
            take fewer rounds and more probes.
        references: With a relative verdict, measure a group of known-good nodes of
            each size tested in a round alongside, as a peer.
        max_culprit_fraction: More suspects than this share of the nodes is a
            cluster-wide problem, not culprits.
        max_rounds: Stop after this many rounds; None: 4 ceil(log2 N) + 12.
        seed: Shuffle the nodes with this seed before splitting; None keeps the
            given order (halves then follow the inventory, often racks).
    """

    retries: int = 1
    fanout: int = 2
    references: bool = True
    max_culprit_fraction: float = 0.5
    max_rounds: int | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"LocaliseOptions.retries must be >= 0, got {self.retries!r}")
        if self.fanout < 2:
            raise ValueError(f"LocaliseOptions.fanout must be >= 2, got {self.fanout!r}")
        if not 0 < self.max_culprit_fraction <= 1:
            raise ValueError(
                "LocaliseOptions.max_culprit_fraction must be in (0, 1], "
                f"got {self.max_culprit_fraction!r}"
            )
        if self.max_rounds is not None and self.max_rounds < 1:
            raise ValueError(f"LocaliseOptions.max_rounds must be >= 1, got {self.max_rounds!r}")


@dataclass(frozen=True)
class Reading:
    """One group's measurement in one round.

    Attributes:
        round: 1 for the first round of probes; 0 for the caller's own results.
        group: The nodes tested together.
        role: Why: ``given`` (the caller's), ``whole`` (the cluster), ``part`` (of a
            bad group), ``single`` (a node with a known-good partner), ``confirm``
            (again, before blaming), ``cross`` (unions, for a link between parts),
            ``reference`` (known-good nodes, a peer for a relative verdict) or
            ``pairing`` (pairs tried when no node is known good).
        value: The measured value; None when the test failed.
        error: Why it failed; empty otherwise.
        bad: The verdict; None when it could not judge (no peers, no floor).
    """

    round: int
    group: Group
    role: Role
    value: float | None
    error: str
    bad: bool | None


@dataclass(frozen=True)
class Culprit:
    """A node or a link blamed, with the readings that convicted it.

    Attributes:
        kind: ``node``, or ``link`` (the two nodes are good apart, bad together).
        nodes: The node, or the link's two ends.
        evidence: The bad readings that convicted it, and for a link the good
            readings that cleared each end.
    """

    kind: CulpritKind
    nodes: Group
    evidence: tuple[Reading, ...]


@dataclass(frozen=True)
class Flake:
    """A group that measured bad, then good when measured again: not blamed.

    Attributes:
        nodes: The group.
        evidence: Its bad readings and the good one.
    """

    nodes: Group
    evidence: tuple[Reading, ...]
