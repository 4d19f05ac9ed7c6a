"""Nodes to bring up without: what ``--exclude`` and ``--exclude-file`` ask for, checked.

Asked for as names or hostlist ranges (``node[3-5]``), or in a file: a preflight JSON
(``rtk preflight --json``, whose ``exclude`` list is used, reasons and all) or text
(one name or range per line, ``#`` comments). ``inventory_without`` checks the request
against the inventory (known names, not the head, ``min_nodes`` still met) and gives
the inventory of the nodes left. Pure: files are read, nothing else is touched.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from toolkit.errors import RtkError, RunDirError
from toolkit.inventory import Inventory
from toolkit.inventory.hostrange import HostRangeError, expand_hosts, name_ranges
from toolkit.rundir.preflight import Exclusion
from toolkit.state.cluster_state import ClusterState

__all__ = [
    "ExcludeError",
    "Exclusion",
    "asked_exclusions",
    "excluded_from_state",
    "inventory_without",
    "merge_exclusions",
    "read_exclude_file",
]

GIVEN = "--exclude"  # the reason of a node named on the command line
NAMES_CHARS = 200  # lists of node names in errors are cut past this


class ExcludeError(RtkError):
    """An exclusion names unknown nodes, the head, or leaves fewer than ``min_nodes``."""

    exit_code = 2


def asked_exclusions(patterns: Sequence[str], files: Sequence[str | Path] = ()) -> list[Exclusion]:
    """The exclusions ``--exclude PATTERN...`` and ``--exclude-file PATH...`` ask for.

    Raises:
        ExcludeError: A pattern is malformed, or a file is unreadable or malformed.
    """
    found: list[Exclusion] = []
    for pattern in patterns:
        found += [Exclusion(node, (GIVEN,)) for node in _expand(pattern, GIVEN)]
    for path in files:
        found += read_exclude_file(Path(path))
    return merge_exclusions(found)


def read_exclude_file(path: Path) -> list[Exclusion]:
    """The exclusions in ``path``: a preflight JSON's ``exclude`` list, or text.

    Text: one name or hostlist range per line; ``#`` starts a comment; blank lines are
    skipped. A JSON object must carry ``exclude`` (``rtk preflight --json``) or a
    ``preflight`` object that does (``rtk up --json``).

    Raises:
        ExcludeError: The file is unreadable, or its content is malformed.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ExcludeError(f"--exclude-file {path}: unreadable ({e})") from e
    if text.lstrip().startswith("{"):
        return _from_json(path, text)
    found: list[Exclusion] = []
    for number, line in enumerate(text.splitlines(), start=1):
        pattern = line.split("#", 1)[0].strip()
        if pattern:
            where = f"{path}:{number}"
            found += [Exclusion(node, (f"listed in {where}",)) for node in _expand(pattern, where)]
    return merge_exclusions(found)


def _from_json(path: Path, text: str) -> list[Exclusion]:
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as e:
        raise ExcludeError(f"--exclude-file {path}: not valid JSON ({e})") from e
    if isinstance(data, dict) and "exclude" not in data and isinstance(data.get("preflight"), dict):
        data = data["preflight"]  # rtk up --json
    items = data.get("exclude") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ExcludeError(
            f"--exclude-file {path}: a JSON file must have an 'exclude' list, as "
            "rtk preflight --json writes (or give a text file: one node or range per line)"
        )
    try:
        found = [Exclusion.from_json(item, f"{path}: exclude[{i}]") for i, item in enumerate(items)]
    except RunDirError as e:
        raise ExcludeError(f"--exclude-file {e}") from e
    return merge_exclusions(found)


def _expand(pattern: str, where: str) -> list[str]:
    try:
        return expand_hosts(pattern)
    except HostRangeError as e:
        raise ExcludeError(f"{where}: {pattern!r}: {e}") from e


def merge_exclusions(found: Iterable[Exclusion]) -> list[Exclusion]:
    """One exclusion per node, in the order first named, with every reason given."""
    merged: dict[str, Exclusion] = {}
    for exclusion in found:
        seen = merged.get(exclusion.node)
        if seen is None:
            merged[exclusion.node] = exclusion
            continue
        reasons = seen.reasons + tuple(r for r in exclusion.reasons if r not in seen.reasons)
        merged[exclusion.node] = Exclusion(seen.node, reasons, seen.head or exclusion.head)
    return list(merged.values())


def inventory_without(inventory: Inventory, excluded: Sequence[Exclusion]) -> Inventory:
    """The inventory of the nodes left once ``excluded`` are left out.

    Its ``min_nodes`` stays the inventory's: the nodes left must still meet it.

    Raises:
        ExcludeError: An excluded node is not in the inventory, it is the head, or
            fewer than ``min_nodes`` nodes would be left.
    """
    if not excluded:
        return inventory
    names = [n.name for n in inventory.nodes]
    known = set(names)
    unknown = [e.node for e in excluded if e.node not in known]
    if unknown:
        raise ExcludeError(
            f"cannot exclude {_names(unknown)}: not in the inventory {inventory.source}, "
            f"whose nodes are {_names(names)}"
        )
    gone = {e.node for e in excluded}
    if inventory.head_name in gone:
        raise ExcludeError(
            f"cannot exclude {inventory.head_name}: it is the head, and a cluster cannot go "
            "on without its head; name another node as head in the inventory "
            f"({inventory.source}), then exclude {inventory.head_name}"
        )
    left = tuple(n for n in inventory.nodes if n.name not in gone)
    if len(left) < inventory.min_nodes:
        raise ExcludeError(
            f"excluding {_names([e.node for e in excluded])} leaves {len(left)} of "
            f"{len(names)} node(s), fewer than min_nodes {inventory.min_nodes}; lower "
            f"min_nodes in {inventory.source} to go on with {len(left)}"
        )
    return dataclasses.replace(inventory, nodes=left)


def excluded_from_state(state: ClusterState | None, inventory: Inventory) -> list[Exclusion]:
    """The exclusions the last ``rtk up`` recorded in the state store, for ``inventory``.

    Only those still naming one of its workers count (the inventory may have changed
    since); a malformed entry is skipped when the state is read (``ClusterState``).
    """
    if state is None:
        return []
    workers = {n.name for n in inventory.workers}
    return [Exclusion(e.node, e.reasons) for e in state.excluded if e.node in workers]


def _names(nodes: Sequence[str]) -> str:
    return name_ranges(nodes, NAMES_CHARS)
