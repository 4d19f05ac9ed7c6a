"""Nodes that share one plan, found in their rendered commands: what ``--dry-run`` groups.

A node's commands differ from another's in its own name, address and SSH port, and
otherwise only where the inventory makes them differ (another Python, SSH user, GPU
count, env). ``group_nodes`` masks each node's own values in its rendered lines
(``<name>``, ``<address>``, ...), and nodes whose masked lines are the same fall into
one ``PlanBlock``. A block keeps a placeholder only where its nodes' values differ, so
a block of one node reads as that node's own commands.

Masking is lossless: putting a node's values back into its block's lines gives its
own lines again (``PlanBlock.lines_for``). A node whose text already holds a
placeholder's spelling is not masked (it stays a block of its own), so that holds
always. Pure: text in, blocks out; nothing here knows the plan's types.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from toolkit.inventory.hostrange import compress_hosts

NAME = "<name>"
ADDRESS = "<address>"
SSH_PORT = "<ssh port>"
PLACEHOLDERS = (NAME, ADDRESS, SSH_PORT)

# A value stands alone where no name character touches it; a dot only when a word
# follows it (``gpu01.site`` is another host, ``gpu01.`` ends a sentence).
_BEFORE = r"(?<![\w.\-])"
_AFTER = r"(?![\w\-]|\.\w)"


@dataclass(frozen=True)
class Token:
    """One of a node's own values, masked as ``placeholder`` where it stands alone.

    Attributes:
        placeholder: What the value reads as in a block (``<address>``).
        value: The node's value (``10.0.0.7``).
        prefix: Text the value must follow to be masked (``-p `` for a port, whose
            digits could stand for anything elsewhere); it stays in the text.
    """

    placeholder: str
    value: str
    prefix: str = ""


@dataclass(frozen=True)
class RenderedNode:
    """A node's rendered commands, with the values that are its own.

    Attributes:
        name: The node's name, as the block's host list names it.
        role: ``head`` or ``worker``: nodes of different roles never share a block.
        lines: The node's rendered lines.
        tokens: The node's own values, masked before comparing.
    """

    name: str
    role: str
    lines: tuple[str, ...]
    tokens: tuple[Token, ...]


@dataclass(frozen=True)
class PlanBlock:
    """Nodes whose commands are the same but for their own values.

    Attributes:
        role: The nodes' role.
        nodes: The nodes, in plan order.
        lines: The first node's lines, each value that differs between the nodes
            shown as its placeholder.
        varying: The placeholders ``lines`` holds, in ``PLACEHOLDERS`` order.
        tokens: Each node's tokens, in ``nodes`` order.
    """

    role: str
    nodes: tuple[str, ...]
    lines: tuple[str, ...]
    varying: tuple[str, ...]
    tokens: tuple[tuple[Token, ...], ...]

    def hostlist(self, max_chars: int = 120) -> str:
        """The nodes as a hostlist (``node[0002-1024]``), cut at a comma past ``max_chars``."""
        return cut_hostlist(self.nodes, max_chars)

    def lines_for(self, node: str) -> tuple[str, ...]:
        """``node``'s own lines: the block's with ``node``'s values put back."""
        tokens = self.tokens[self.nodes.index(node)]
        return tuple(_unmask(line, tokens) for line in self.lines)


def group_nodes(nodes: Sequence[RenderedNode]) -> tuple[PlanBlock, ...]:
    """Blocks of the nodes whose masked lines are the same, in order of first node.

    Args:
        nodes: Every node's rendered commands, in plan order.

    Returns:
        The blocks; each node is in exactly one.
    """
    members: dict[tuple[str, bool, tuple[str, ...]], list[RenderedNode]] = {}
    for node in nodes:
        lines, tokens = _masked(node)
        # An unmasked node never joins a masked one whose text reads the same.
        members.setdefault((node.role, bool(tokens), lines), []).append(
            RenderedNode(node.name, node.role, lines, tokens)
        )
    blocks = []
    for (role, _, lines), group in members.items():
        same = _same_values(group)
        shown = tuple(_unmask(line, same) for line in lines)
        blocks.append(
            PlanBlock(
                role=role,
                nodes=tuple(n.name for n in group),
                lines=shown,
                varying=tuple(p for p in PLACEHOLDERS if any(p in line for line in shown)),
                tokens=tuple(n.tokens for n in group),
            )
        )
    return tuple(blocks)


def masked_lines(node: RenderedNode) -> tuple[str, ...]:
    """``node``'s lines with its own values as placeholders (as they are if ambiguous)."""
    return _masked(node)[0]


def _masked(node: RenderedNode) -> tuple[tuple[str, ...], tuple[Token, ...]]:
    """The masked lines and the tokens masked; none where a line spells a placeholder."""
    if any(p in line for p in PLACEHOLDERS for line in node.lines):
        return node.lines, ()
    by_text = _by_text(node.tokens)
    if not by_text:
        return node.lines, ()
    texts = sorted(by_text, key=len, reverse=True)
    pattern = re.compile(_BEFORE + "(?:" + "|".join(re.escape(t) for t in texts) + ")" + _AFTER)
    lines = tuple(
        pattern.sub(lambda m: by_text[m.group(0)].prefix + by_text[m.group(0)].placeholder, line)
        for line in node.lines
    )
    return lines, node.tokens


def cut_hostlist(names: Sequence[str], max_chars: int = 120) -> str:
    """``compress_hosts(names)``, cut at a comma past ``max_chars`` with ``...`` after."""
    text = compress_hosts(names)
    if len(text) <= max_chars:
        return text
    cut = text.rfind(",", 0, max_chars)
    return (text[:cut] if cut > 0 else text[:max_chars]) + ",..."


def _by_text(tokens: Sequence[Token]) -> dict[str, Token]:
    """Each token by the text it masks; the first token wins where two read the same."""
    found: dict[str, Token] = {}
    for token in tokens:
        if token.value:
            found.setdefault(token.prefix + token.value, token)
    return found


def _same_values(group: Sequence[RenderedNode]) -> tuple[Token, ...]:
    """The tokens every node of ``group`` has with one value: shown as that value."""
    first = group[0].tokens
    return tuple(
        token
        for token in first
        if all(
            any(t.placeholder == token.placeholder and t.value == token.value for t in n.tokens)
            for n in group[1:]
        )
    )


def _unmask(line: str, tokens: Sequence[Token]) -> str:
    # Placeholders only stand where masked_lines put them (a text holding one is never
    # masked), so replacing them gives the node's text back.
    for token in tokens:
        if token.value:
            line = line.replace(token.prefix + token.placeholder, token.prefix + token.value)
    return line
