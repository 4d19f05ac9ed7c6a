"""Host ranges in SLURM's hostlist syntax: ``gpu[01-16]``, ``n[1-3,7]``, ``a[1-2]-b[1-2]``.

Numbers keep the zero padding of the range's first bound, several bracket groups
expand as a cartesian product (left to right), and a comma outside brackets joins
independent patterns (``gpu[01-02],login1``).

The other way, for people to read: ``name_ranges`` names many hosts in one short line
(``node001-node060, node062``), as reports and preflight show them; for SLURM,
``compress_hosts`` writes a hostlist ``expand_hosts`` (and sbatch) reads back.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence

from toolkit.errors import RtkError

MAX_HOSTS = 65536

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_NUMBERED = re.compile(r"^(.*?)([0-9]+)$")
# ASCII digits only (``\d`` takes any script's), at most 18 of them: a longer number
# is no host's, and Python refuses to read one of over 4,300 digits.
_NUMBER_OR_RANGE = re.compile(r"([0-9]{1,18})(?:-([0-9]{1,18}))?")


class HostRangeError(RtkError):
    """A host pattern is malformed or expands to nothing."""


def expand_hosts(pattern: str) -> list[str]:
    """Expand a hostlist pattern into host names, in order.

    Args:
        pattern: A host name or hostlist pattern.

    Returns:
        The host names; a plain name gives itself.

    Raises:
        HostRangeError: The pattern is malformed, reversed, or expands to nothing.
    """
    hosts: list[str] = []
    for part in _split_top_level(pattern):
        hosts.extend(_expand_one(part))
        if len(hosts) > MAX_HOSTS:
            raise HostRangeError(f"expands to more than {MAX_HOSTS} hosts")
    if not hosts:
        raise HostRangeError("expands to no host")
    return hosts


def _split_top_level(pattern: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in pattern:
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostRangeError("nested '[' is not allowed")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostRangeError("']' without a matching '['")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise HostRangeError("'[' without a matching ']'")
    parts.append("".join(current))
    for part in parts:
        if not part.strip():
            raise HostRangeError("empty host name between commas")
    return [p.strip() for p in parts]


def _expand_one(pattern: str) -> list[str]:
    pieces = _BRACKET.split(pattern)
    # pieces alternate: literal, bracket body, literal, bracket body, ..., literal
    literals = pieces[0::2]
    choices = [_expand_body(body) for body in pieces[1::2]]
    for literal in literals:
        if any(c.isspace() for c in literal):
            raise HostRangeError(f"host name {pattern!r} contains whitespace")
    # Several brackets multiply: n[0-65535][0-65535] would be 4 billion names.
    count = math.prod(len(values) for values in choices)
    if count > MAX_HOSTS:
        raise HostRangeError(f"expands to more than {MAX_HOSTS} hosts")
    hosts = []
    for combo in itertools.product(*choices):
        name = literals[0]
        for value, literal in zip(combo, literals[1:], strict=True):
            name += value + literal
        hosts.append(name)
    return hosts


def _expand_body(body: str) -> list[str]:
    if not body.strip():
        raise HostRangeError("empty brackets '[]'")
    values: list[str] = []
    for item in body.split(","):
        item = item.strip()
        match = _NUMBER_OR_RANGE.fullmatch(item)
        if match is None:
            raise HostRangeError(f"{item!r} is not a number or a range like 01-16")
        first, last = match.group(1), match.group(2)
        if last is None:
            values.append(first)
            continue
        low, high = int(first), int(last)
        if high < low:
            raise HostRangeError(f"range {item!r} runs backwards")
        if high - low + 1 > MAX_HOSTS - len(values):
            raise HostRangeError(f"range {item!r} makes the brackets larger than {MAX_HOSTS} hosts")
        width = len(first) if first.startswith("0") else 0
        values.extend(str(n).zfill(width) for n in range(low, high + 1))
    return values


def name_ranges(names: Sequence[str], max_chars: int = 60) -> str:
    """``node001-node060, node062``: consecutive numbered names as ranges, cut to fit.

    Names keep their order; a run of names with the same prefix and width whose numbers
    follow each other becomes ``first-last``. Past ``max_chars`` the rest is ``...``.
    """
    runs: list[list[str]] = []
    last: tuple[str, int, int] | None = None
    for name in names:
        match = _NUMBERED.match(name)
        key = (match.group(1), len(match.group(2)), int(match.group(2))) if match else None
        if key and last and key[:2] == last[:2] and key[2] == last[2] + 1 and runs:
            runs[-1].append(name)
        else:
            runs.append([name])
        last = key
    pieces = [run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs]
    text = ""
    for piece in pieces:
        candidate = piece if not text else f"{text}, {piece}"
        if len(candidate) > max_chars and text:
            return f"{text}, ..."
        text = candidate
    return text


def compress_hosts(names: Sequence[str]) -> str:
    """The hostlist of ``names``: ``node[03-05,07],login1``, as SLURM's options take it.

    Names ending in a number are grouped by what comes before it and the number's width
    (so zero padding survives), in the order each group is first named; numbers are
    sorted and runs become ranges; duplicates go. ``expand_hosts`` gives the names back.
    """
    groups: dict[tuple[str, int], set[str]] = {}
    for name in names:
        match = _NUMBERED.match(name)
        if match is None:
            groups.setdefault((name, -1), set())
        else:
            groups.setdefault((match.group(1), len(match.group(2))), set()).add(match.group(2))
    parts = []
    for (prefix, width), numbers in groups.items():
        if width < 0:
            parts.append(prefix)
        elif len(numbers) == 1:
            parts.append(prefix + numbers.pop())
        else:
            parts.append(f"{prefix}[{_number_ranges(sorted(numbers, key=int))}]")
    return ",".join(parts)


def _number_ranges(numbers: list[str]) -> str:
    """``01,02,03,07`` -> ``01-03,07`` (same-width numbers, sorted)."""
    runs: list[list[str]] = []
    for number in numbers:
        if runs and int(number) == int(runs[-1][-1]) + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ",".join(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def fit_hostlist(names: Sequence[str], max_chars: int = 100) -> str:
    """``compress_hosts(names)`` cut to about ``max_chars`` for a terminal line.

    The cut falls between two items and keeps brackets balanced, so the shown part reads
    as a hostlist followed by ``...`` (``n[0001,0005,...]``); the whole list goes to
    ``--json``/``--verbose``, never here.
    """
    text = compress_hosts(names)
    if len(text) <= max_chars:
        return text
    cut = text.rfind(",", 0, max(max_chars - 4, 1))
    if cut <= 0:
        return text[: max(max_chars - 3, 1)] + "..."
    head = text[:cut]
    inside = head.count("[") > head.count("]")
    return head + (",...]" if inside else ",...")
