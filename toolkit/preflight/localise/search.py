"""The state and rounds of one localisation (``toolkit.preflight.localise.find``'s engine).

``Search`` holds every reading, the cleared and blamed nodes and the open leads
(``leads``); a round plans each lead's tests, lends free known-good nodes as
partners and references, runs the probe once and settles the leads. The inference
lives here too: which readings implicate a node, when a node or link is blamed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from toolkit.preflight.localise.leads import (
    Confirm,
    Cross,
    CrossParts,
    Lead,
    Pool,
    Single,
    Split,
    Test,
    halves,
)
from toolkit.preflight.localise.types import (
    PEER_SIZE_RATIO,
    Culprit,
    Failed,
    Flake,
    Group,
    LocaliseOptions,
    Probe,
    ProbeResult,
    Reading,
    Verdict,
)

RELATIVE_START_PARTS = 4


class Search:
    """The state of one localisation: readings, cleared and blamed nodes, open leads."""

    def __init__(
        self,
        nodes: Group,
        probe: Probe,
        verdict: Verdict,
        options: LocaliseOptions,
        max_rounds: int,
    ) -> None:
        self.nodes, self.probe, self.verdict, self.options = nodes, probe, verdict, options
        self.max_rounds = max_rounds
        self.round = 0
        self.readings: list[Reading] = []
        self.cleared: dict[str, None] = {}  # an ordered set
        self.convicted: set[str] = set()
        self.culprits: list[Culprit] = []
        self.flakes: list[Flake] = []
        self.unresolved: list[Group] = []
        self.leads: list[Lead] = []
        self._bad_by_node: dict[str, list[Reading]] = {}
        self._pairs_tested: set[frozenset[str]] = set()
        self._pairings = 0

    # -- measuring -------------------------------------------------------------

    def start(self, measured: Sequence[tuple[Group, ProbeResult]]) -> None:
        """The first leads: from the caller's results, else from the whole cluster."""
        if measured:
            tests: list[Test] = [(group, "given") for group, _ in measured]
            judged = self._judge(0, tests, [result for _, result in measured])
            readings = [r if r.bad is not None else _bad(r) for r in judged]
            self._record(readings)
        elif self.verdict.judges_alone:
            readings = self._measure([(self.nodes, "whole")])
        else:  # a relative verdict cannot judge the whole alone: start from its parts
            readings = [Reading(0, self.nodes, "given", None, "taken as bad", True)]
        components: list[set[str]] = []
        for reading in readings:
            if not reading.bad:
                continue
            suspects = {m for m in reading.group if self.suspect(m)}
            if not suspects:
                self.leads += self.confirm(reading.group, None)
                continue
            joined = [c for c in components if c & suspects]
            components = [c for c in components if not c & suspects]
            components.append(suspects.union(*joined))
        # a relative verdict splits the first groups wider: with two halves only, a bad
        # node in each would look alike
        wide = max(self.options.fanout, RELATIVE_START_PARTS)
        fanout = None if self.verdict.judges_alone else wide
        for component in components:
            members = tuple(n for n in self.nodes if n in component)
            if len(members) >= 2:
                self.leads.append(Split(members, fanout))
            else:
                self.leads += self.lead_for(members, ())

    def _measure(self, tests: list[Test]) -> list[Reading]:
        seen: set[str] = set()
        for group, _ in tests:
            if seen & set(group):
                raise AssertionError(f"groups of one round share a node: {tests!r}")
            seen |= set(group)
        self.round += 1
        results = list(self.probe([group for group, _ in tests]))
        if len(results) != len(tests):
            raise ValueError(f"the probe answered {len(results)} results for {len(tests)} groups")
        readings = self._judge(self.round, tests, results)
        self._record(readings)
        return readings

    def _judge(self, round_: int, tests: list[Test], results: Sequence[object]) -> list[Reading]:
        values: list[float | None] = []
        errors: list[str] = []
        for result in results:
            value, error = _value(result)
            values.append(value)
            errors.append(error)
        readings = []
        for i, (group, role) in enumerate(tests):
            peers = [
                v
                for j, v in enumerate(values)
                if j != i and v is not None and _peers(len(group), len(tests[j][0]))
            ]
            bad = self.verdict.is_bad(values[i], peers)
            readings.append(Reading(round_, group, role, values[i], errors[i], bad))
        return readings

    def _record(self, readings: Sequence[Reading]) -> None:
        for reading in readings:
            self.readings.append(reading)
            if len(reading.group) == 2:
                self._pairs_tested.add(frozenset(reading.group))
            for node in reading.group:
                if reading.bad:
                    self._bad_by_node.setdefault(node, []).append(reading)
                elif reading.bad is False:  # None (could not judge) clears nothing
                    self.cleared.setdefault(node, None)

    # -- rounds ----------------------------------------------------------------

    def run(self) -> None:
        """Rounds until no lead is open, none can go on, or the round limit."""
        while self.leads:
            self.leads = [new for lead in self.leads for new in lead.refresh(self)]
            if not self.leads or self.round >= self.max_rounds:
                break
            planned, pool = self._plan()
            if not planned:
                if self._pairing():
                    continue
                break
            tests = [test for _, own in planned for test in own]
            references = self._references(tests, pool)
            readings = self._measure(tests + references)
            busy = {id(lead) for lead, _ in planned}
            settled: list[Lead] = [lead for lead in self.leads if id(lead) not in busy]
            start = 0
            for lead, own in planned:
                settled += lead.settle(self, readings[start : start + len(own)])
                start += len(own)
            for reference in readings[start:]:  # known-good nodes measured bad
                if reference.bad:
                    settled += self.confirm(reference.group, None)
            self.leads = settled
        self.unresolved += [lead.group for lead in self.leads]

    def _plan(self) -> tuple[list[tuple[Lead, list[Test]]], Pool]:
        busy: set[str] = set()
        ready = []
        for lead in self.leads:
            if busy.isdisjoint(lead.group):
                busy.update(lead.group)
                ready.append(lead)
        pool = Pool([n for n in self.cleared if n not in busy])
        planned = []
        for lead in ready:
            tests = lead.plan(self, pool)
            if tests:
                planned.append((lead, tests))
        return planned, pool

    def _references(self, tests: list[Test], pool: Pool) -> list[Test]:
        if self.verdict.fraction is None or not self.options.references:
            return []
        found: list[Test] = []
        for size in sorted({len(group) for group, _ in tests}):
            if pool.count() >= size:
                found.append((tuple(str(pool.take()) for _ in range(size)), "reference"))
        return found

    def _pairing(self) -> bool:
        """With no known-good partner free: pairs of suspects not yet tested together."""
        if self._pairings > self.options.retries:
            return False
        owned = {n for lead in self.leads for n in lead.group}
        stuck = [n for n in self.nodes if n in owned and self.suspect(n)]
        pairs: list[Test] = []
        used: set[str] = set()
        for i, a in enumerate(stuck):
            if a in used:
                continue
            for b in stuck[i + 1 :]:
                if b not in used and frozenset((a, b)) not in self._pairs_tested:
                    pairs.append(((a, b), "pairing"))
                    used |= {a, b}
                    break
        if not pairs:
            return False
        self._pairings += 1
        self._measure(pairs)
        return True

    # -- inference -------------------------------------------------------------

    def suspect(self, node: str) -> bool:
        """Neither cleared nor blamed."""
        return node not in self.cleared and node not in self.convicted

    def implicating(self, node: str) -> list[Reading]:
        """Bad readings of ``node`` in which every other node is cleared."""
        return [
            r
            for r in self._bad_by_node.get(node, [])
            if all(m == node or m in self.cleared for m in r.group)
        ]

    def bad_readings_of(self, group: Group) -> list[Reading]:
        """The bad readings of exactly these nodes."""
        members = frozenset(group)
        return [r for r in self._bad_by_node.get(group[0], []) if frozenset(r.group) == members]

    def lead_for(self, members: Group, group: Group) -> list[Lead]:
        """What a bad ``group`` whose suspects are ``members`` asks next."""
        suspects = tuple(m for m in members if self.suspect(m))
        if len(suspects) >= 2:
            return [Split(suspects)]
        if suspects:
            return Single(suspects[0]).refresh(self)
        return self.confirm(group or members, None)

    def after_cleared(self, node: str) -> list[Lead]:
        """A suspect measured good: what it was bad with is the question."""
        implicating = self.implicating(node)
        if not implicating:
            return []
        group = min(implicating, key=lambda r: len(r.group)).group
        rest = tuple(m for m in group if m != node)
        return self.confirm(group, [(node,), rest])

    def confirm(self, group: Group, parts: Sequence[Group] | None) -> list[Lead]:
        """Measure a bad group of cleared nodes again, unless it is bad often enough."""
        needed = self.options.retries + 1 - len(self.bad_readings_of(group))
        if needed > 0:
            return [Confirm(group, parts, needed)]
        return self.after_confirmed(group, parts)

    def after_confirmed(self, group: Group, parts: Sequence[Group] | None) -> list[Lead]:
        """A group of cleared nodes, bad again: a pair is a link, else look across parts."""
        if len(group) == 2:
            self.blame_link(group)
            return []
        return self.cross_parts(list(parts) if parts else halves(group))

    def cross_parts(self, parts: Sequence[Group]) -> list[Lead]:
        """Good parts, bad together: search between them."""
        return self.cross(parts[0], parts[1]) if len(parts) == 2 else [CrossParts(parts)]

    def cross(self, a: Group, b: Group) -> list[Lead]:
        """Two good sides, bad together: one node each is a pair to confirm."""
        if len(a) == 1 and len(b) == 1:
            return self.confirm(a + b, None)
        return [Cross(a, b)]

    def blame_node(self, node: str, implicating: list[Reading]) -> None:
        """``node`` is bad: convicted by ``implicating``."""
        self.convicted.add(node)
        self.culprits.append(Culprit("node", (node,), tuple(implicating)))

    def blame_link(self, pair: Group) -> None:
        """Both ends are good apart and bad together: the link."""
        cleared_by = [
            next((r for r in self.readings if r.bad is False and end in r.group), None)
            for end in pair
        ]
        good = [r for r in dict.fromkeys(cleared_by) if r is not None]
        self.culprits.append(Culprit("link", pair, (*self.bad_readings_of(pair), *good)))


def _peers(size: int, other: int) -> bool:
    return max(size, other) <= PEER_SIZE_RATIO * min(size, other)


def _value(result: object) -> tuple[float | None, str]:
    """A probe result as (value, error); None when the test failed."""
    if isinstance(result, Failed):
        return None, result.error or "failed"
    if isinstance(result, bool):
        return (1.0, "") if result else (None, "failed")
    if isinstance(result, int | float) and math.isfinite(result):
        return float(result), ""
    return None, f"no usable result: {result!r}"


def _bad(reading: Reading) -> Reading:
    """A caller's lone result that the verdict cannot judge: taken as bad (why ask)."""
    return Reading(reading.round, reading.group, reading.role, reading.value, reading.error, True)
