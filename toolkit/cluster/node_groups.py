"""Nodes grouped by what they share (a failure's cause, a command's output), for any N.

At a thousand nodes a line per node buries the few lines that matter: the same cause
printed 900 times and one other cause printed once. Grouping by a normalised text
(the node's own name and addresses taken out, so per-node detail does not split a
group) gives one line per distinct cause, with its nodes as a hostlist range.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from toolkit.inventory.hostrange import fit_hostlist

MAX_GROUPS = 10
HOSTLIST_CHARS = 60
CAUSE_CHARS = 160

# IPv4 with an optional :port, and IPv6 written with at least two colons and hex.
_ADDRESS = re.compile(
    r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"
    r"|(?<![\w:])(?:[0-9a-fA-F]{0,4}:){2,7}[0-9a-fA-F]{0,4}(?![\w:])"
)
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class NodeGroup:
    """Nodes that share one text (a cause, an output), in the order first seen."""

    text: str
    nodes: tuple[str, ...]

    @property
    def count(self) -> int:
        """How many nodes share the text."""
        return len(self.nodes)

    def hostlist(self, max_chars: int = HOSTLIST_CHARS) -> str:
        """The nodes as a hostlist range (``n[0001-0003,0017]``), cut to ``max_chars``."""
        return fit_hostlist(self.nodes, max_chars)


def normalise_cause(node: str, cause: str) -> str:
    """``cause`` without what only this node says: its name, addresses, line breaks.

    The node's own name becomes ``<node>`` (leading ``<node>: `` prefixes go: the group
    names the nodes), an IP address (with its port) ``<address>``, and the text is one line.
    """
    text = _SPACES.sub(" ", cause).strip()
    if node:
        text = re.sub(rf"(?<![\w.-]){re.escape(node)}(?![\w-])", "<node>", text)
    text = _ADDRESS.sub("<address>", text)
    while text.startswith("<node>: "):
        text = text[len("<node>: ") :]
    if len(text) > CAUSE_CHARS:
        text = text[: CAUSE_CHARS - 3] + "..."
    return text or "(no reason given)"


def group_nodes(
    items: Iterable[tuple[str, str]], key: Callable[[str, str], str] = normalise_cause
) -> list[NodeGroup]:
    """Group ``(node, text)`` pairs by ``key(node, text)``; the largest group first.

    Groups of the same size keep the order in which their first node came; a node
    named twice counts once, in the group of its first text.
    """
    members: dict[str, list[str]] = {}
    seen: set[str] = set()
    for node, text in items:
        if node in seen:
            continue
        seen.add(node)
        members.setdefault(key(node, text), []).append(node)
    order = {text: i for i, text in enumerate(members)}
    groups = [NodeGroup(text, tuple(nodes)) for text, nodes in members.items()]
    return sorted(groups, key=lambda g: (-g.count, order[g.text]))


def render_failure_groups(
    groups: list[NodeGroup], what: str = "failed", max_groups: int = MAX_GROUPS
) -> list[str]:
    """One line per cause, the largest first: ``  12 node(s) n[0001-0012]: cause``.

    Past ``max_groups`` causes, one line says how many more there are and where to look.
    """
    if not groups:
        return []
    nodes = sum(g.count for g in groups)
    lines = [f"{what}: {nodes} node(s), {len(groups)} cause(s)"]
    for group in groups[:max_groups]:
        lines.append(f"  {group.count:>5} node(s) {group.hostlist()}: {group.text}")
    if len(groups) > max_groups:
        lines.append(f"  and {len(groups) - max_groups} more causes (--verbose / --json)")
    return lines
