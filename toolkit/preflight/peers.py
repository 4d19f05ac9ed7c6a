"""Which nodes each node checks the Ray ports of: every other one, or a ring and random peers.

Every pair is ``N x (N - 1)`` connections per port: 63 peers a node at 64 nodes, 1,023
at 1,024 (2.1 million connections for the cluster, and a node's list of targets in the
thousands). Up to ``ALL_PAIRS_MAX_NODES`` nodes up, every node checks every other one:
at most 63 peers x 2 ports (+3 on the head), 129 connections a node, made 64 at a time
by ``facts.py``: milliseconds when healthy, at most three connect timeouts (6 s) when
all are filtered. And a single bad link (one cable, one switch port) is found for sure,
which matters most on the small clusters where every link carries the collectives.

Above it, each node checks its next node up in inventory order (the ring: every node is
both checked and checks) plus ``RANDOM_PEERS`` others drawn at random (seeded: the same
seed draws the same peers). A node tested by fewer than ``MIN_TESTERS`` nodes then
gets more testers drawn at random, so every node up has at least ``MIN_TESTERS``.
What that finds:

- a port closed or firewalled on a node, from everywhere: every one of its (at least 3)
  testers fails, so it is found with certainty, and graded as that node's fault (more
  than ``exclusions.MIN_PEERS`` testers agree);
- a node cut from a fraction ``f`` of the others (another rack, a partial firewall):
  each of its ~``RANDOM_PEERS`` + 1 testers and each of its ~``RANDOM_PEERS`` random peers
  falls in the cut with probability ``f``, so some pair shows it with probability
  ``1 - (1 - f) ** 16`` or so: 99% for ``f`` = 0.25, 81% for ``f`` = 0.1; a cut between
  two racks of 32 nodes among 1,024 is missed only when none of ``32 x 8`` random draws
  lands across it: ``(1 - 32/1023) ** 256``, 0.03%;
- one pair that cannot connect while both nodes work: found with probability about
  ``(RANDOM_PEERS + 1) / (N - 1)`` (0.9% at 1,024): that is what ``--port-peers all``
  (or the ``--bandwidth`` ring) is for.

The cost per node stays ~``RANDOM_PEERS`` + 1 peers whatever N: 1,024 nodes try ~9,200
pairs instead of 1,047,552.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ALL_PAIRS_MAX_NODES",
    "MIN_TESTERS",
    "RANDOM_PEERS",
    "PeerMode",
    "PeerPlan",
    "choose_mode",
    "parse_mode",
    "select_peers",
]

ALL_PAIRS_MAX_NODES = 64  # every pair up to this many nodes up; a ring and random peers above
RANDOM_PEERS = 8  # random peers per node above it (besides its ring peer)
MIN_TESTERS = 3  # every node up is tested by at least this many (fewer with fewer peers)
DEFAULT_SEED = 0


@dataclass(frozen=True)
class PeerMode:
    """How peers are chosen.

    Attributes:
        all_pairs: Every node checks every other node up.
        random_peers: Otherwise: the ring peer plus this many random ones (0: the ring).
    """

    all_pairs: bool
    random_peers: int = 0

    @property
    def label(self) -> str:
        """``all``, ``ring`` or ``ring+8``, as the option takes it and the record shows it."""
        if self.all_pairs:
            return "all"
        return f"ring+{self.random_peers}" if self.random_peers else "ring"


def parse_mode(text: str) -> PeerMode | None:
    """``--port-peers``: ``auto`` (None: by size), ``all``, ``ring``, or N random peers.

    Raises:
        ValueError: Anything else.
    """
    value = text.strip().lower()
    if value == "auto":
        return None
    if value == "all":
        return PeerMode(all_pairs=True)
    if value == "ring":
        return PeerMode(all_pairs=False)
    if value.removeprefix("ring+").isdigit():
        return PeerMode(all_pairs=False, random_peers=int(value.removeprefix("ring+")))
    raise ValueError(f"expected auto, all, ring or a number of random peers (e.g. 8), got {text!r}")


def choose_mode(asked: PeerMode | None, nodes_up: int) -> PeerMode:
    """What ``auto`` (``asked`` None) means for ``nodes_up`` nodes, or what was asked."""
    if asked is not None:
        return asked
    if nodes_up <= ALL_PAIRS_MAX_NODES:
        return PeerMode(all_pairs=True)
    return PeerMode(all_pairs=False, random_peers=RANDOM_PEERS)


@dataclass(frozen=True)
class PeerPlan:
    """Each node's peers: whose Ray ports it connects to.

    Attributes:
        mode: How they were chosen (``all_pairs`` when a ring and random peers would
            have covered every pair anyway).
        seed: The random draw's seed.
        peers: Source node -> the nodes it checks, in the order drawn.
    """

    mode: PeerMode
    seed: int
    peers: dict[str, tuple[str, ...]]

    def testers(self) -> dict[str, int]:
        """Node -> how many nodes check it (nodes nobody checks left out)."""
        count: dict[str, int] = {}
        for targets in self.peers.values():
            for target in targets:
                count[target] = count.get(target, 0) + 1
        return count

    @property
    def pairs(self) -> int:
        """How many (source, target) pairs are checked."""
        return sum(len(t) for t in self.peers.values())


def select_peers(
    sources: Sequence[str], targets: Sequence[str], mode: PeerMode, seed: int = DEFAULT_SEED
) -> PeerPlan:
    """The peers each of ``sources`` checks among ``targets`` (the nodes Ray is up on).

    A source never checks itself. In ring mode a source that is a target checks the
    target after it (the last one the first); a source that is not one (Ray is not up
    there) checks ``random_peers`` + 1 random targets instead. With random peers, every
    target then gets at least ``min(MIN_TESTERS, random_peers + 1)`` testers where there
    are enough sources. The same arguments always give the same plan.
    """
    if mode.all_pairs or len(targets) - 1 <= mode.random_peers + 1:
        every = {s: tuple(t for t in targets if t != s) for s in sources}
        return PeerPlan(PeerMode(all_pairs=True), seed, every)
    rng = random.Random(seed)
    index = {t: i for i, t in enumerate(targets)}
    peers: dict[str, list[str]] = {}
    for source in sources:
        chosen: list[str] = []
        at = index.get(source)
        if at is not None:
            chosen.append(targets[(at + 1) % len(targets)])
        want = mode.random_peers + (1 if at is None else 0)
        chosen += _draw(rng, targets, want, {t for t in (source, *chosen) if t in index})
        peers[source] = chosen
    if mode.random_peers:
        _top_up(rng, sources, targets, peers, min(MIN_TESTERS, mode.random_peers + 1))
    return PeerPlan(mode, seed, {s: tuple(p) for s, p in peers.items()})


def _draw(rng: random.Random, targets: Sequence[str], count: int, skip: set[str]) -> list[str]:
    """``count`` distinct targets not in ``skip`` (targets too; fewer if not enough)."""
    count = min(count, len(targets) - len(skip))
    drawn: list[str] = []
    # A few more than needed, so the ones skipped rarely call for another draw.
    while len(drawn) < count:
        for i in rng.sample(range(len(targets)), min(len(targets), count + len(skip))):
            target = targets[i]
            if target not in skip and len(drawn) < count:
                drawn.append(target)
                skip = skip | {target}
    return drawn


def _top_up(
    rng: random.Random,
    sources: Sequence[str],
    targets: Sequence[str],
    peers: dict[str, list[str]],
    least: int,
) -> None:
    """Add testers, drawn at random, to every target that has fewer than ``least``."""
    testers: dict[str, set[str]] = {t: set() for t in targets}
    for source, chosen in peers.items():
        for target in chosen:
            testers[target].add(source)
    for target in targets:
        have = testers[target]
        others = len(sources) - (1 if target in peers else 0)
        while len(have) < min(least, others):
            source = sources[rng.randrange(len(sources))]
            if source != target and source not in have:
                peers[source].append(target)
                have.add(source)
