"""Nodes that are alike, shown as one line (named as ranges by ``hostrange.name_ranges``).

A node is alike its peers when its sampler completed, it misses no part of the
window, it has the same devices (GPU count, host, what its total sums) and its energy
is within ``ALIKE_SHARE`` of the median of those peers. The rest differ, and are shown
one by one.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from toolkit.telemetry.report.figures.energy import NodeReport

ALIKE_SHARE = 0.15


@dataclass(frozen=True)
class NodeGroup:
    """Nodes shown on one line.

    Attributes:
        nodes: The nodes, in manifest order.
        alike: Whether they were grouped for being alike (else a node that differs).
    """

    nodes: list[NodeReport]
    alike: bool

    @property
    def names(self) -> list[str]:
        """The nodes' names."""
        return [n.name for n in self.nodes]


def devices_of(node: NodeReport) -> tuple[int, bool, str]:
    """What a node has: its GPU count, whether it has a host reading, its total's scope."""
    gpus = sum(1 for d in node.devices.values() if d.kind == "gpu")
    return gpus, "host" in node.devices, node.scope


def group_nodes(nodes: Sequence[NodeReport], odd: Iterable[str] = ()) -> list[NodeGroup]:
    """Alike nodes grouped (by their devices), then each node that differs on its own.

    ``odd`` names nodes that differ whatever their figures (a node named as an outlier).
    """
    named = set(odd)
    kinds: dict[tuple[int, bool, str], list[NodeReport]] = {}
    differ: list[NodeReport] = []
    for node in nodes:
        if node.status != "complete" or node.partial or node.name in named:
            differ.append(node)
        else:
            kinds.setdefault(devices_of(node), []).append(node)
    groups: list[NodeGroup] = []
    for peers in kinds.values():
        median_j = statistics.median(n.energy_j for n in peers)
        alike = [n for n in peers if _near(n.energy_j, median_j)]
        differ += [n for n in peers if not _near(n.energy_j, median_j)]
        if alike:
            groups.append(NodeGroup(alike, alike=True))
    order = {n.name: i for i, n in enumerate(nodes)}
    differ.sort(key=lambda n: order[n.name])
    return groups + [NodeGroup([n], alike=False) for n in differ]


def _near(value: float, median: float) -> bool:
    if median <= 0:
        return value <= 0
    return abs(value / median - 1.0) < ALIKE_SHARE
