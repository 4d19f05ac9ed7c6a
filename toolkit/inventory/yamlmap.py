"""YAML loading that remembers where every key and value came from.

PyYAML's composed node tree carries line marks; this walks it once, builds plain
Python data, records the line of every key path, and reports duplicate keys
(which ``yaml.safe_load`` would silently collapse).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

KeyPath = tuple[str | int, ...]


@dataclass
class LocatedData:
    """Plain data from a YAML document with the line of each key path.

    Attributes:
        data: The document as dicts, lists and scalars.
        lines: 1-based line of each key path (the key's line for mapping entries).
        duplicates: ``(path, first_line, second_line)`` for keys given twice.
    """

    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)
    duplicates: list[tuple[KeyPath, int, int]] = field(default_factory=list)

    def line_of(self, path: KeyPath) -> int | None:
        """Line of ``path``, or of its nearest ancestor that has one."""
        for cut in range(len(path), -1, -1):
            line = self.lines.get(path[:cut])
            if line is not None:
                return line
        return None


def load_located(text: str) -> LocatedData:
    """Parse one YAML document, keeping lines.

    Raises:
        yaml.YAMLError: The text is not valid YAML.
    """
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    located = LocatedData(data=None)
    if root is None:
        return located
    located.lines[()] = root.start_mark.line + 1
    located.data = _build(root, (), located)
    return located


def _build(node: yaml.Node, path: KeyPath, located: LocatedData) -> Any:
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node)
            child: KeyPath = (*path, key if isinstance(key, str | int) else str(key))
            line = key_node.start_mark.line + 1
            if key in result:
                located.duplicates.append((child, located.lines[child], line))
            located.lines[child] = line
            result[key] = _build(value_node, child, located)
        return result
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item_node in enumerate(node.value):
            child = (*path, index)
            located.lines[child] = item_node.start_mark.line + 1
            items.append(_build(item_node, child, located))
        return items
    return _scalar(node)


def _scalar(node: yaml.Node) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        # A mapping or list used as a key: keep it printable for the error.
        return yaml.safe_load(yaml.serialize(node))
    constructor = yaml.SafeLoader.yaml_constructors.get(node.tag)
    if constructor is None:
        return node.value
    loader = yaml.SafeLoader("")
    return constructor(loader, node)
