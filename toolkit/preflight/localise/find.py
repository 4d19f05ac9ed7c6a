"""Find the node or link behind a bad cluster-wide test, in few rounds of parallel tests.

When an all-reduce across the cluster is slow or fails, or a TCP or Ray-port test
between nodes does, ``localise`` tests smaller groups of nodes until the culprit is
named. It is pure logic over an injected ``Probe``: the caller runs the tests (Ray
tasks pinned per node on a cluster, a simulation in the tests), so every path here is
tested without a cluster, and it imports only the standard library (a Ray job driver
may run it).

The model: a group's test is bad when the group holds a bad node, or both ends of a
bad link. A round is one call of the probe on disjoint groups (no node in two), which
a cluster runs in parallel; rounds are the time localisation spends, probes the tests.

The search:

- A bad group is split into ``fanout`` parts (halves by default); the parts of every
  bad group are tested in the same round, and bad parts are split again.
- A part of one node is tested with a known-good partner (a node of a group that
  measured good). A node is blamed once it measured bad ``retries + 1`` times with
  known-good company and no one partner was in all of those tests. Bad with one
  partner and good with another points to the link between the two, which is blamed
  once that pair measured bad ``retries + 1`` times.
- A bad group whose parts all measure good is measured again: good now is a flake
  (reported, never blamed); bad again means a link across the parts, found by testing
  unions of their halves (two rounds a level).
- With no known-good node at all, pairs not yet tested together are tried for
  ``retries + 1`` rounds; what is still bad then is cluster-wide, as is a search
  whose suspects exceed ``max_culprit_fraction`` of the nodes.

A culprit can hide another: a bad link inside a group that a bad node already makes
bad is not looked for. Localising again without the blamed nodes finds it.

One bad node among N costs about log2(N) + 1 rounds and 2 log2(N) probes (plus the
reference groups a relative verdict measures alongside); ``fanout`` trades probes for
rounds. ``benchmarks/localise_rounds.py`` measures both.

Modules: this one is the entry point and the result; ``types`` the records,
``search`` the rounds and the blame, ``leads`` the open questions.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from toolkit.preflight.localise.search import Search
from toolkit.preflight.localise.types import (
    Conclusion,
    Culprit,
    Failed,
    Flake,
    Group,
    LocaliseOptions,
    Probe,
    ProbeResult,
    Reading,
    Role,
    Verdict,
)

__all__ = [
    "Conclusion",
    "Culprit",
    "Failed",
    "Flake",
    "Group",
    "Localisation",
    "LocaliseOptions",
    "Probe",
    "ProbeResult",
    "Reading",
    "Role",
    "Verdict",
    "localise",
]


@dataclass(frozen=True)
class Localisation:
    """What localisation found, and every measurement it took.

    Attributes:
        conclusion: ``localised`` (culprits named), ``cluster-wide`` (no single
            culprit: everything measured bad, or too much of it), ``flaky`` (the bad
            results did not repeat; nothing blamed) or ``healthy`` (nothing was bad).
        culprits: The nodes and links blamed, each with the readings that convicted
            it; empty unless ``localised``.
        flaky: Groups that measured bad once and good when measured again.
        cleared: Nodes that measured good in some group, in the order they did.
        unresolved: Bad groups that could not be narrowed further (all of the
            suspects when ``cluster-wide``).
        readings: Every measurement, the caller's own (round 0) first.
        nodes: The nodes localisation was given.
    """

    conclusion: Conclusion
    culprits: tuple[Culprit, ...]
    flaky: tuple[Flake, ...]
    cleared: Group
    unresolved: tuple[Group, ...]
    readings: tuple[Reading, ...]
    nodes: Group

    @property
    def rounds_used(self) -> int:
        """Rounds of probes run (the caller's own measurements not counted)."""
        return max((r.round for r in self.readings), default=0)

    @property
    def probes_run(self) -> int:
        """Group tests run over all rounds."""
        return sum(1 for r in self.readings if r.round > 0)

    def by_round(self) -> dict[int, tuple[Reading, ...]]:
        """The readings of each round, round 0 being the caller's own."""
        rounds: dict[int, list[Reading]] = {}
        for reading in self.readings:
            rounds.setdefault(reading.round, []).append(reading)
        return {n: tuple(found) for n, found in rounds.items()}

    @property
    def bad_nodes(self) -> Group:
        """The nodes blamed on their own (links are not in it: either end may go)."""
        return tuple(n for c in self.culprits if c.kind == "node" for n in c.nodes)

    def describe(self) -> list[str]:
        """A few lines for the terminal: the conclusion, then one line per finding."""
        spent = f"{self.rounds_used} rounds, {self.probes_run} probes"
        lines: list[str]
        if self.conclusion == "healthy":
            lines = [f"nothing to localise: every group measured good ({spent})"]
        elif self.conclusion == "cluster-wide":
            suspects = len({n for g in self.unresolved for n in g})
            found = (
                "measured bad in every group tried"
                if any(r.bad for r in self.readings if r.role not in ("given", "whole"))
                else "measured alike, no part worse than the others"
            )
            lines = [
                f"cluster-wide, no single culprit: {suspects} of {len(self.nodes)} nodes "
                f"{found} ({spent}); look at what they share (network, configuration) "
                "or at the expected value"
            ]
        elif self.conclusion == "flaky":
            lines = [f"no culprit: the bad results did not repeat ({spent})"]
        else:
            lines = [f"localised in {spent}"]
        for culprit in self.culprits:
            bad = sum(1 for r in culprit.evidence if r.bad)
            lines.append(f"  {culprit.kind} {'-'.join(culprit.nodes)}: bad in {bad} tests")
        if self.conclusion == "localised":
            lines += [f"  unresolved {_shown(g)}" for g in self.unresolved]
        lines += [f"  flaky (bad once, then good) {_shown(f.nodes)}" for f in self.flaky]
        return lines


def _shown(group: Group, most: int = 6) -> str:
    """Up to ``most`` names, then how many more: a line fits a screen at any N."""
    names = ",".join(group[:most])
    return names if len(group) <= most else f"{names} and {len(group) - most} more"


def localise(
    nodes: Sequence[str],
    probe: Probe,
    verdict: Verdict,
    measured: Sequence[tuple[Sequence[str], ProbeResult]] = (),
    options: LocaliseOptions = LocaliseOptions(),  # noqa: B008 - frozen
) -> Localisation:
    """Name the node(s) or link(s) that make a cluster-wide test bad.

    Args:
        nodes: The node names (at least 2, no repeats).
        probe: Runs a round: given disjoint groups, the test on each at once.
        verdict: What counts as a bad result.
        measured: The caller's own results already in hand, as (group, result): the
            cluster-wide all-reduce, or the pairs of a TCP ring. Judged with
            ``verdict``; a lone one it cannot judge (relative verdict) counts as bad.
            Empty: round 1 measures the whole cluster, or, when ``verdict`` cannot
            judge a lone group, takes it as bad and starts from its quarters.
        options: Retries, fanout, references, limits and the seed.

    Returns:
        The conclusion, the culprits with their evidence, flakes, cleared nodes and
        every reading.

    Raises:
        ValueError: Fewer than 2 nodes, a repeated node, a group naming a node not in
            ``nodes``, or a probe answering with the wrong number of results.
    """
    order = list(nodes)
    if len(order) < 2 or len(set(order)) != len(order):
        raise ValueError(f"localise needs 2 or more distinct nodes, got {order!r}")
    known = set(order)
    for group, _ in measured:
        if not group or not set(group) <= known:
            raise ValueError(f"measured group {tuple(group)!r} names nodes not in {order!r}")
    if options.seed is not None:
        random.Random(options.seed).shuffle(order)
    limit = options.max_rounds or 4 * math.ceil(math.log2(len(order))) + 12
    search = Search(tuple(order), probe, verdict, options, limit)
    search.start([(tuple(g), r) for g, r in measured])
    search.run()
    return _conclude(search, tuple(nodes), options)


def _conclude(search: Search, nodes: Group, options: LocaliseOptions) -> Localisation:
    culprits = tuple(search.culprits)
    unresolved = tuple(search.unresolved)
    # what would have to go: blamed nodes, unresolved groups, and one end of each link
    suspects = {n for c in culprits if c.kind == "node" for n in c.nodes}
    suspects |= {n for g in unresolved for n in g}
    out = len(suspects) + sum(1 for c in culprits if c.kind == "link")
    conclusion: Conclusion
    if out and (not search.cleared or out > options.max_culprit_fraction * len(nodes)):
        conclusion = "cluster-wide"
        unresolved = (*unresolved, *(c.nodes for c in culprits))
        culprits = ()
    elif culprits or unresolved:
        conclusion = "localised"
    else:
        conclusion = "flaky" if search.flakes else "healthy"
    return Localisation(
        conclusion=conclusion,
        culprits=culprits,
        flaky=tuple(search.flakes),
        cleared=tuple(search.cleared),
        unresolved=unresolved,
        readings=tuple(search.readings),
        nodes=nodes,
    )
