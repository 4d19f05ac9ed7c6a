"""Which nodes a run could go on without, from the checks of a preflight.

A node is named when it failed a check of its own (a node-scoped check), or when every
pair into it, or every pair out of it, failed while it has at least ``MIN_PEERS`` peers:
then the fault is on that node (a Ray port closed there, its firewall, its route), not on
the links. A pair that fails alone names no node: one link (a cable, a switch port) is
not something a run can leave out, so it is reported apart (``bad_links``). When every
node's pairs fail, no node stands out either: those are links too (a firewall on all).

The head is named like any node but marked ``head``: a cluster cannot go on without
its head, so ``rtk up --exclude`` refuses it and asks for another head in the inventory.

These feed ``preflight.json``'s ``exclude`` and ``links`` (``rtk preflight --json | jq
.exclude``), which ``rtk up --exclude-file`` and ``rtk sbatch --exclude-file`` read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence

from toolkit.preflight.terminal_summary import scope_nodes
from toolkit.rundir.preflight import BadLink, Check, Exclusion

__all__ = ["MIN_PEERS", "BadLink", "Exclusion", "bad_links", "exclusions"]

MIN_PEERS = 2  # a node is blamed for its pairs only when this many peers agree
# Pair checks already graded per node where they were made (``port_reach``: a node's
# port no tester reached is a check on that node): their failed pairs are links only.
GRADED_PAIRS = ("net.port.",)

Pair = tuple[str, str]


def exclusions(checks: Iterable[Check], head: str | None = None) -> list[Exclusion]:
    """The nodes to go on without, each with why, in the order their checks came.

    Args:
        checks: Every check of one preflight.
        head: The head's name: its exclusion, if any, has ``head`` set.

    Returns:
        One ``Exclusion`` per node that failed a node-scoped check or all of its pairs
        in one direction; each reason reads ``check-name: measured``.
    """
    found = list(checks)
    order = _node_order(found)
    reasons: dict[str, list[str]] = {}
    for check in found:
        if check.status == "fail" and len(scope_nodes(check.scope)) == 1:
            reasons.setdefault(check.scope, []).append(f"{check.name}: {check.measured}")
    for node, why in _pair_culprits(found).items():
        reasons.setdefault(node, []).extend(why)
    return [
        Exclusion(node, tuple(reasons[node]), head=node == head)
        for node in sorted(reasons, key=order.__getitem__)
    ]


def bad_links(checks: Iterable[Check], culprits: Collection[str] = ()) -> list[BadLink]:
    """Failed pairs that neither end explains: links, which no exclusion fixes.

    Args:
        checks: Every check of one preflight.
        culprits: The nodes already named (``exclusions``): their pairs are explained.

    Returns:
        One ``BadLink`` per failed pair, in check order, with each failed check of it.
    """
    named = set(culprits)
    links: dict[str, list[str]] = {}
    for check in checks:
        ends = scope_nodes(check.scope)
        if check.status != "fail" or len(ends) != 2 or named.intersection(ends):
            continue
        links.setdefault(check.scope, []).append(f"{check.name}: {check.measured}")
    return [BadLink(pair, tuple(why)) for pair, why in links.items()]


def _node_order(checks: Sequence[Check]) -> dict[str, int]:
    """Every node a check names -> the position it was first named at."""
    order: dict[str, int] = {}
    for check in checks:
        for node in scope_nodes(check.scope):
            order.setdefault(node, len(order))
    return order


def _pair_culprits(checks: Sequence[Check]) -> dict[str, list[str]]:
    """Nodes every pair into (or out of) failed with ``MIN_PEERS`` peers or more -> why."""
    failures: dict[Pair, list[Check]] = {}
    for check in checks:
        ends = scope_nodes(check.scope)
        if len(ends) == 2 and not check.name.startswith(GRADED_PAIRS):
            pair = (ends[0], ends[1])
            failures.setdefault(pair, [])
            if check.status == "fail":
                failures[pair].append(check)
    into: dict[str, list[Pair]] = {}
    out_of: dict[str, list[Pair]] = {}
    for pair in failures:
        out_of.setdefault(pair[0], []).append(pair)
        into.setdefault(pair[1], []).append(pair)
    culprits: dict[str, list[str]] = {}
    for direction, by_node in (("into", into), ("out of", out_of)):
        for node, pairs in by_node.items():
            if len(pairs) >= MIN_PEERS and all(failures[p] for p in pairs):
                failed = [c for p in pairs for c in failures[p]]
                culprits.setdefault(node, []).extend(_pair_reasons(failed, direction, node, pairs))
    nodes = set(into) | set(out_of)
    if culprits and set(culprits) == nodes:
        return {}  # every node's pairs failed: nothing stands out, they are all links
    return culprits


def _pair_reasons(failed: list[Check], direction: str, node: str, pairs: list[Pair]) -> list[str]:
    """One reason per check name: ``net.port.gcs: failed on 5/5 pairs into n3 (refused)``."""
    reasons = []
    by_name: dict[str, list[Check]] = {}
    for check in failed:
        by_name.setdefault(check.name, []).append(check)
    for name, alike in by_name.items():
        measured = Counter(c.measured for c in alike).most_common(1)[0][0]
        peers = len({c.scope for c in alike})
        reasons.append(
            f"{name}: failed on {peers}/{len(pairs)} pairs {direction} {node} ({measured})"
        )
    return reasons
