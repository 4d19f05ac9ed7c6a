"""Preflight for a person at any node count: counts by family, then each problem once.

A preflight runs a check per node and per pair of nodes and port: thousands of checks
at 64 nodes. The terminal shows how many checks of each family (the part of a check's
name before its first dot) passed, warned and failed, then only what failed or warned.
Checks that failed the same way share a line: on many nodes (``node03-node09, node12
(8 nodes)``), or on many pairs around one node (``node01-node06, node08-node64
(63 nodes) -> node07``, a port closed on node07). The lines stay within ``MAX_LINES``
whatever the node count: past it, the checks that need the most lines are summed up in
one line each. ``--verbose`` and ``--json`` keep every check.

What counts as "the same way": the same status, name, measured value, threshold and
hint once the check's own nodes are masked out of them (``open gcs on node07`` and
``open gcs on node12`` are the same hint, about two nodes).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from toolkit.inventory.hostrange import name_ranges
from toolkit.rundir.preflight import STATUSES, Check, Status

__all__ = [
    "CLUSTER",
    "MAX_LINES",
    "failed_nodes",
    "family",
    "family_counts",
    "scope_nodes",
    "summary_lines",
]

CLUSTER = "cluster"  # the scope of a check about the whole cluster
MAX_LINES = 40  # the most lines the summary (with its heading) takes, whatever N
MAX_LINES_PER_CHECK = 6  # a check that needs more lines is summed up in one
NAMES_CHARS = 48  # node ranges on a problem line are cut past this many characters
NEXT_NAMES_CHARS = 240  # ... and on the next-step line, which names every failed node
NEXT_CHECKS = 6  # the next-step line names at most this many checks
MORE_CHARS = 160  # the line naming the problems left out is cut past this

# The roles a check's nodes play, masked out of its texts when checks are compared.
_NODE, _SRC, _DST = "<node>", "<src>", "<dst>"
_SEVERAL = {_NODE: "each node", _SRC: "each source", _DST: "each target"}


def family(name: str) -> str:
    """A check's family: its name up to the first dot (``host`` of ``host.dev_shm``)."""
    return name.split(".", 1)[0]


def scope_nodes(scope: str) -> tuple[str, ...]:
    """The nodes a scope names: ``(node,)``, ``(source, target)`` of a pair, or none.

    A link's scope ``a<->b`` (localisation's, either way) names ``(a, b)``.
    """
    if scope == CLUSTER:
        return ()
    a, link, b = scope.partition("<->")  # a link, either way (localisation's)
    if link:
        return (a, b)
    src, arrow, dst = scope.partition("->")
    return (src, dst) if arrow else (scope,)


def failed_nodes(checks: Iterable[Check]) -> list[str]:
    """The nodes that failed a check of their own (not a pair's or the cluster's).

    In the order their checks first appear (the inventory's, as the runner adds them).
    These are the nodes a run could leave out; a failed pair names a link between two
    nodes, and which end is at fault is for the pair lines to say.
    """
    failed: dict[str, bool] = {}
    for check in checks:
        if len(scope_nodes(check.scope)) == 1:
            failed[check.scope] = failed.get(check.scope, False) or check.status == "fail"
    return [node for node, fail in failed.items() if fail]


def family_counts(checks: Iterable[Check]) -> dict[str, dict[Status, int]]:
    """Family -> status -> how many checks, families in the order they first appear."""
    counts: dict[str, dict[Status, int]] = {}
    for check in checks:
        by_status = counts.setdefault(family(check.name), dict.fromkeys(STATUSES, 0))
        by_status[check.status] += 1
    return counts


@dataclass(frozen=True)
class _Line:
    """Checks that failed or warned the same way (or a block of them summed up), one line.

    Attributes:
        status: warn or fail.
        name: The checks' name.
        where: Their nodes or pairs, named compactly.
        measured: What was found (one reading, or how many different ones).
        threshold: What counts as good (empty when the checks differ in it).
    """

    status: Status
    name: str
    where: str
    measured: str
    threshold: str

    def text(self) -> str:
        """The line as printed."""
        line = f"  {self.status.upper():4}  {self.name:24} {self.where:18}  {self.measured}"
        return line + (f" (want {self.threshold})" if self.threshold else "")


@dataclass
class _Block:
    """The problem lines of one check name and status, with its hint."""

    lines: list[_Line]
    folded: _Line
    hint: str
    count: int  # how many checks
    centres: list[str] = field(default_factory=list)
    fold: bool = False
    show_hint: bool = True

    def shown(self) -> list[str]:
        lines = [self.folded] if self.fold else self.lines
        text = [line.text() for line in lines]
        if self.hint and self.show_hint:
            text.append(f"        hint: {self.hint}")
        return text


def summary_lines(
    checks: Sequence[Check], only_problems: bool = False, max_lines: int = MAX_LINES
) -> list[str]:
    """The counts by family, the problems grouped, and what to do next.

    ``only_problems`` leaves out the counts by family (``rtk up`` shows it this way).
    At most ``max_lines`` lines (a heading above them not counted), as long as the
    table of families leaves room for a few.
    """
    counts = family_counts(checks)
    total = {s: sum(c[s] for c in counts.values()) for s in STATUSES}
    lines = [] if only_problems else _table(counts, total)
    if not total["warn"] and not total["fail"]:
        return [*lines[:-1], f"  all {len(checks)} checks passed"]  # not a row of totals
    if only_problems:
        lines.append(f"  {total['pass']} passed, {total['warn']} warned, {total['fail']} failed")
    blocks = _blocks(checks)
    after = _next_step(checks, blocks) if total["fail"] else []
    room = max_lines - len(lines) - len(after)
    return lines + _fit(blocks, room) + after


def _table(counts: dict[str, dict[Status, int]], total: dict[Status, int]) -> list[str]:
    width = max([len("family"), *(len(f) for f in counts)])
    rows = [f"  {'family':{width}}  {'passed':>7} {'warned':>7} {'failed':>7}"]
    for name, n in [*counts.items(), ("total", total)]:
        rows.append(f"  {name:{width}}  {n['pass']:>7} {n['warn']:>7} {n['fail']:>7}")
    return rows


def _blocks(checks: Sequence[Check]) -> list[_Block]:
    """One block per (status, name) of the problems: failures first, then by name."""
    problems: dict[tuple[Status, str], list[Check]] = {}
    for check in checks:
        if check.status != "pass":
            problems.setdefault((check.status, check.name), []).append(check)
    order = sorted(problems, key=lambda k: (-STATUSES.index(k[0]), k[1]))
    return [_block(*key, problems[key]) for key in order]


def _block(status: Status, name: str, checks: list[Check]) -> _Block:
    ways: dict[tuple[str, str, str], list[Check]] = {}
    for check in checks:
        way = (_masked(check.measured, check), _masked(check.threshold, check))
        ways.setdefault((*way, _masked(check.hint, check)), []).append(check)
    lines: list[_Line] = []
    centres: list[str] = []
    for (measured, threshold, _), alike in ways.items():
        for where, members, centre in _places(alike, MAX_LINES_PER_CHECK + 1 - len(lines)):
            shown = (members[0].measured, members[0].threshold)
            if len(members) > 1:
                shown = (_shown(measured, members), _shown(threshold, members))
            lines.append(_Line(status, name, where, *shown))
            centres += [centre] if centre else []
        if len(lines) > MAX_LINES_PER_CHECK:
            break
    first = next((c for c in checks if c.hint), checks[0])
    hint = _shown(_masked(first.hint, first), checks)
    block = _Block(lines, _folded(status, name, checks, ways), hint, len(checks), centres)
    block.fold = len(lines) > MAX_LINES_PER_CHECK
    return block


def _places(checks: list[Check], most: int) -> list[tuple[str, list[Check], str]]:
    """The lines alike checks take: (where, the checks, the node pairs centre on or "").

    Node checks share one line; pairs are covered by stars (every pair into one
    target, or out of one source), the largest first; the cluster's check is its own.
    Past ``most`` lines the rest is left out (the block is summed up anyway).
    """
    nodes = [c for c in checks if len(scope_nodes(c.scope)) == 1]
    pairs = [(scope_nodes(c.scope), c) for c in checks if len(scope_nodes(c.scope)) == 2]
    places: list[tuple[str, list[Check], str]] = []
    if nodes:
        places.append((_node_names([c.scope for c in nodes]), nodes, ""))
    while pairs and len(places) < most:
        ends: Counter[tuple[int, str]] = Counter()
        for (src, dst), _ in pairs:
            ends[(1, dst)] += 1  # a target first: a port closed on one node
            ends[(0, src)] += 1
        (end, centre), _ = ends.most_common(1)[0]
        star = [(ab, c) for ab, c in pairs if ab[end] == centre]
        pairs = [(ab, c) for ab, c in pairs if ab[end] != centre]
        others = _node_names([ab[1 - end] for ab, _ in star])
        if len(star) == 1:
            places.append((star[0][1].scope, [star[0][1]], ""))
        else:
            where = f"{others} -> {centre}" if end else f"{centre} -> {others}"
            places.append((where, [c for _, c in star], centre))
    cluster = [c for c in checks if not scope_nodes(c.scope)]
    return places + ([(CLUSTER, cluster, "")] if cluster else [])


def _folded(
    status: Status, name: str, checks: list[Check], ways: dict[tuple[str, str, str], list[Check]]
) -> _Line:
    """One line for every check of a block that would take too many."""
    nodes = [c.scope for c in checks if len(scope_nodes(c.scope)) == 1]
    pairs = [c for c in checks if len(scope_nodes(c.scope)) == 2]
    where = [_node_names(nodes)] if nodes else []
    if pairs:
        ends = list(dict.fromkeys(n for c in pairs for n in scope_nodes(c.scope)))
        where.append(f"{len(pairs)} pairs among {_node_names(ends)}")
    if len(nodes) + len(pairs) < len(checks):
        where.append(CLUSTER)
    readings = list(dict.fromkeys(measured for measured, _, _ in ways))
    thresholds = {threshold for _, threshold, _ in ways}
    measured = _shown(readings[0], checks)
    if len(readings) > 1:
        measured = f"{len(readings)} different readings, e.g. {checks[0].measured}"
    threshold = _shown(thresholds.pop(), checks) if len(thresholds) == 1 else ""
    return _Line(status, name, "; ".join(where), measured, threshold)


def _fit(blocks: list[_Block], room: int) -> list[str]:
    """The blocks' lines within ``room``: fold the largest, drop hints, then cut."""

    def size() -> int:
        return sum(len(b.shown()) for b in blocks)

    while size() > room:
        unfolded = [b for b in blocks if not b.fold and len(b.lines) > 1]
        if not unfolded:
            break
        max(unfolded, key=lambda b: len(b.lines)).fold = True
    for block in reversed(blocks):
        if size() <= room:
            break
        block.show_hint = False
    if size() <= room:
        return [line for b in blocks for line in b.shown()]
    # Too many kinds of problem: those on the most checks are shown, the others named.
    kept: set[int] = set()
    used = 1  # the line naming what is left out
    for i in sorted(range(len(blocks)), key=lambda i: _weight(blocks[i])):
        if used + len(blocks[i].shown()) <= room:
            kept.add(i)
            used += len(blocks[i].shown())
    left = [b.folded for i, b in enumerate(blocks) if i not in kept]
    names = ", ".join(f"{p.name} ({p.status})" for p in left)
    more = f"  ... and {len(left)} more: {names}"
    more = more if len(more) <= MORE_CHARS else more[: MORE_CHARS - 3] + "..."
    return [line for i, b in enumerate(blocks) if i in kept for line in b.shown()] + [more]


def _weight(block: _Block) -> tuple[int, int]:
    """Which problems show first when not all fit: failures, then on the most checks."""
    return -STATUSES.index(block.folded.status), -block.count


def _next_step(checks: Sequence[Check], blocks: list[_Block]) -> list[str]:
    """What to look at first: the nodes that failed, then where every check is."""
    own = failed_nodes(checks)
    named = set(own)
    centres = [n for b in blocks if b.folded.status == "fail" for n in b.centres]
    centres = [n for n in dict.fromkeys(centres) if n not in named]
    lines = []
    if own:
        which = sorted({c.name for c in checks if c.status == "fail" and c.scope in named})
        if len(which) > NEXT_CHECKS:
            which[NEXT_CHECKS:] = [f"{len(which) - NEXT_CHECKS} more"]
        lines.append(
            f"next: investigate {_node_names(own, NEXT_NAMES_CHARS)}, where node checks "
            f"failed ({', '.join(which)})"
        )
    if centres:
        lead = "      and" if lines else "next: investigate"
        lines.append(f"{lead} {_node_names(centres, NEXT_NAMES_CHARS)}, where failed pairs meet")
    if not lines:
        lines.append("next: investigate the failures above")
    lines.append("      every check: rtk preflight --verbose (or --json)")
    return lines


def _node_names(nodes: Sequence[str], max_chars: int = NAMES_CHARS) -> str:
    """The nodes as ranges, in natural order (``node9`` before ``node10``), and how many."""
    unique = sorted(dict.fromkeys(nodes), key=_natural)
    names = name_ranges(unique, max_chars)
    return names if len(unique) == 1 else f"{names} ({len(unique)} nodes)"


def _natural(name: str) -> list[str | int]:
    """A sort key reading the numbers in a name as numbers."""
    return [int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", name))]


def _roles(scope: str) -> list[tuple[str, str]]:
    nodes = scope_nodes(scope)
    return list(zip((_SRC, _DST) if len(nodes) == 2 else (_NODE,), nodes, strict=False))


def _masked(text: str, check: Check) -> str:
    """``text`` with the check's own nodes replaced by their roles (``<dst>``)."""
    for role, node in _roles(check.scope):
        if node and node in text:
            text = _word(node).sub(role, text)
    return text


def _shown(masked: str, checks: Sequence[Check]) -> str:
    """A masked text for several checks: a role all of them share is named, else told."""
    for role in _SEVERAL:
        if role in masked:
            nodes = {dict(_roles(c.scope)).get(role) for c in checks}
            node = nodes.pop() if len(nodes) == 1 else None
            masked = masked.replace(role, node or _SEVERAL[role])
    return masked


@functools.lru_cache(maxsize=4096)
def _word(node: str) -> re.Pattern[str]:
    """``node`` as a whole word: not ``node1`` inside ``node10``."""
    return re.compile(rf"(?<![\w.-]){re.escape(node)}(?![\w-])")
