"""The leads of a localisation search: each one open question about some nodes.

Each round every lead that can proposes its tests (``Search`` keeps leads from sharing
a node in a round and lends known-good partners from a ``Pool``), the probe runs them
all at once, and each lead settles into the leads that follow from its readings:

- ``Split``: a bad group of suspect nodes; test its parts.
- ``Single``: one suspect node; test it with known-good partners until it is blamed
  or cleared (then the link it was bad with is the question).
- ``Confirm``: a bad group made of cleared nodes; measure it again before anything.
- ``Cross``: a group bad again though its two sides are good: a link between them.
- ``CrossParts``: the same with three or more parts (``fanout`` > 2).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from toolkit.preflight.localise.types import Flake, Group, Reading, Role

if TYPE_CHECKING:
    from toolkit.preflight.localise.search import Search

Test = tuple[Group, Role]


def chunks(members: Group, count: int) -> list[Group]:
    """``members`` in ``count`` contiguous parts whose sizes differ by at most one."""
    size, extra = divmod(len(members), count)
    parts, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        parts.append(members[start:end])
        start = end
    return parts


def halves(group: Group) -> list[Group]:
    """Two near-equal parts, or the group itself when it is one node."""
    return chunks(group, 2) if len(group) > 1 else [group]


def partition(members: Group, fanout: int, partners: int) -> tuple[list[Group], Group] | None:
    """Parts to test and nodes held back, given the known-good partners free.

    As many parts as ``fanout`` allows while every one-node part gets a partner; with
    none free, three nodes test two and hold one, and two cannot be split (None).
    """
    for count in range(min(fanout, len(members)), 1, -1):
        size, extra = divmod(len(members), count)
        if (count - extra if size == 1 else 0) <= partners:
            return chunks(members, count), ()
    if len(members) >= 3:
        return [members[:-1]], members[-1:]
    return None


class Pool:
    """The known-good nodes free in a round, lent as partners and references."""

    def __init__(self, free: list[str]) -> None:
        self._free = free
        self._taken: set[str] = set()
        self._first = 0  # every node before this index is taken

    def count(self) -> int:
        """How many are left."""
        return len(self._free) - len(self._taken)

    def take(
        self, avoid: frozenset[str] = frozenset(), never: frozenset[str] = frozenset()
    ) -> str | None:
        """The first free node not in ``avoid``, else one not in ``never``; None if none."""
        while self._first < len(self._free) and self._free[self._first] in self._taken:
            self._first += 1
        fallback = None
        for node in itertools.islice(self._free, self._first, None):
            if node in self._taken:
                continue
            if node not in avoid:
                self._taken.add(node)
                return node
            if fallback is None and node not in never:
                fallback = node
        if fallback is not None:
            self._taken.add(fallback)
        return fallback


class Lead:
    """One open question about some nodes (see the module's docstring)."""

    group: Group  # the nodes it owns this round; what stays unresolved if it ends open

    def refresh(self, s: Search) -> list[Lead]:
        """The leads this one is now, after other leads' readings."""
        return [self]

    def plan(self, s: Search, pool: Pool) -> list[Test] | None:
        """This round's tests, or None to wait."""
        raise NotImplementedError

    def settle(self, s: Search, readings: Sequence[Reading]) -> list[Lead]:
        """The leads that follow from this round's readings of ``plan``'s tests."""
        raise NotImplementedError


class Split(Lead):
    """A bad group of suspect nodes: test its parts."""

    def __init__(self, members: Group, fanout: int | None = None) -> None:
        self.group = members
        self.fanout = fanout  # None: the options' own
        self.parts: list[Group] = []
        self.held: Group = ()

    def refresh(self, s: Search) -> list[Lead]:
        """Members cleared or blamed elsewhere shrink it (a node: a ``Single``)."""
        if all(s.suspect(m) for m in self.group):
            return [self]
        return s.lead_for(self.group, self.group)

    def plan(self, s: Search, pool: Pool) -> list[Test] | None:
        """Its parts, one-node parts with a known-good partner; None while it cannot split."""
        split = partition(self.group, self.fanout or s.options.fanout, pool.count())
        if split is None:
            return None
        self.parts, self.held = split
        tests: list[Test] = []
        for part in self.parts:
            partner = pool.take() if len(part) == 1 else None
            tests.append((part, "part") if partner is None else ((*part, partner), "single"))
        return tests

    def settle(self, s: Search, readings: Sequence[Reading]) -> list[Lead]:
        """Bad parts are split again; no bad part at all: measure the whole again."""
        found: list[Lead] = []
        for part, reading in zip(self.parts, readings, strict=True):
            if reading.bad:
                found += s.lead_for(part, reading.group)
            elif reading.bad is None:  # measured alone, nothing to compare with
                s.unresolved.append(part)
        found += [lead for node in self.held for lead in Single(node).refresh(s)]
        if all(r.bad is False for r in readings) and not self.held:
            found += s.confirm(self.group, self.parts)
        return found


class Single(Lead):
    """One suspect node: test it with known-good partners until blamed or cleared."""

    def __init__(self, node: str) -> None:
        self.group = (node,)

    def refresh(self, s: Search) -> list[Lead]:
        """Blamed when bad enough with no partner in common; cleared: its link."""
        node = self.group[0]
        if node in s.convicted:
            return []
        if node in s.cleared:
            return s.after_cleared(node)
        implicating = s.implicating(node)
        if len(implicating) > s.options.retries and not _common(node, implicating):
            s.blame_node(node, implicating)
            return []
        return [self]

    def plan(self, s: Search, pool: Pool) -> list[Test] | None:
        """The node with a known-good partner not in all its bad tests so far."""
        node = self.group[0]
        common = _common(node, s.implicating(node))
        partner = pool.take(common, common if len(common) == 1 else frozenset())
        return None if partner is None else [((node, partner), "single")]

    def settle(self, s: Search, readings: Sequence[Reading]) -> list[Lead]:
        """See ``refresh``; measured alone with nothing to compare: unresolved."""
        if readings[0].bad is None:
            s.unresolved.append(self.group)
            return []
        return self.refresh(s)


class Confirm(Lead):
    """A bad group of cleared nodes: measure it again before anything is blamed."""

    def __init__(self, group: Group, parts: Sequence[Group] | None, needed: int) -> None:
        self.group, self.parts, self.needed = group, parts, needed

    def plan(self, s: Search, pool: Pool) -> list[Test] | None:
        """The group again."""
        return [(self.group, "confirm")]

    def settle(self, s: Search, readings: Sequence[Reading]) -> list[Lead]:
        """Good now: a flake; bad again (often enough): a link, or look across."""
        reading = readings[0]
        if reading.bad is None:  # nothing to compare it with: cannot tell
            s.unresolved.append(self.group)
            return []
        if not reading.bad:
            s.flakes.append(Flake(self.group, (*s.bad_readings_of(self.group), reading)))
            return []
        self.needed -= 1
        return [self] if self.needed > 0 else s.after_confirmed(self.group, self.parts)


class Cross(Lead):
    """Sides each good, bad together: test unions of their halves for the link."""

    def __init__(self, a: Group, b: Group) -> None:
        self.group = a + b
        left, right = halves(a), halves(b)
        if len(left) == 2 and len(right) == 2:
            self.stages = [
                [(left[0], right[0]), (left[1], right[1])],
                [(left[0], right[1]), (left[1], right[0])],
            ]
        else:
            self.stages = [[(x, y)] for x in left for y in right]
        self.stage = 0
        self.bad: list[tuple[Group, Group]] = []

    def plan(self, s: Search, pool: Pool) -> list[Test] | None:
        """This stage's unions of one half of each side."""
        return [(x + y, "cross") for x, y in self.stages[self.stage]]

    def settle(self, s: Search, readings: Sequence[Reading]) -> list[Lead]:
        """After the last stage: the bad unions are the next question."""
        for sides, reading in zip(self.stages[self.stage], readings, strict=True):
            if reading.bad:
                self.bad.append(sides)
        self.stage += 1
        if self.stage < len(self.stages):
            return [self]
        if not self.bad:  # bad only as a whole
            s.unresolved.append(self.group)
        return [lead for x, y in self.bad for lead in s.cross(x, y)]


class CrossParts(Lead):
    """A group bad again whose three or more parts are good: which two halves."""

    def __init__(self, parts: Sequence[Group]) -> None:
        self.group = tuple(n for part in parts for n in part)
        half = len(parts) // 2
        self.sides = (list(parts[:half]), list(parts[half:]))
        self.tested = [side for side in self.sides if len(side) >= 2]

    def plan(self, s: Search, pool: Pool) -> list[Test] | None:
        """Each half of the parts, joined."""
        return [(_joined(side), "cross") for side in self.tested]

    def settle(self, s: Search, readings: Sequence[Reading]) -> list[Lead]:
        """A bad half is searched further; neither: across the two halves."""
        bad = [side for side, r in zip(self.tested, readings, strict=True) if r.bad]
        if not bad:
            return s.cross(_joined(self.sides[0]), _joined(self.sides[1]))
        return [lead for side in bad for lead in s.cross_parts(side)]


def _common(node: str, readings: Sequence[Reading]) -> frozenset[str]:
    """The partners ``node`` had in every one of ``readings`` (none when no readings)."""
    if not readings:
        return frozenset()
    return frozenset.intersection(*(frozenset(r.group) - {node} for r in readings))


def _joined(parts: Sequence[Group]) -> Group:
    return tuple(n for part in parts for n in part)
