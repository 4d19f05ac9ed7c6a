"""YAML loading that remembers where every key and value came from.

PyYAML's composed node tree carries line marks; this walks it once, builds plain
Python data, records the line of every key path, and reports duplicate keys
(which ``yaml.safe_load`` would silently collapse). Merge keys (``<<: *defaults``)
merge as ``yaml.safe_load`` merges them. It also keeps the text a plain scalar was
written as wherever YAML 1.1 read it as something else (``010`` is 8, ``1:30`` is
90, ``2024-01-01`` a date), so that a schema that wants text can have the text
(``toolkit/inventory/yaml_text.py``).

A hostile file cannot make it run away: anchors and aliases may expand to at most
``MAX_VALUES`` values, nesting stops at ``MAX_DEPTH``, and an alias that contains
itself, a list or mapping used as a key, and a tag ``yaml.safe_load`` does not know
are refused as YAML errors with their line.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import ConstructorError

KeyPath = tuple[str | int, ...]

# Far more than any inventory or sweep file holds (a 1,024-node inventory written node
# by node is about 10,000 values), and far fewer than an alias bomb expands to.
MAX_VALUES = 100_000
MAX_DEPTH = 64
MERGE_TAG = "tag:yaml.org,2002:merge"
STR_TAG = "tag:yaml.org,2002:str"


@dataclass
class LocatedData:
    """Plain data from a YAML document with the line of each key path.

    Attributes:
        data: The document as dicts, lists and scalars.
        lines: 1-based line of each key path (the key's line for mapping entries).
        duplicates: ``(path, first_line, second_line)`` for keys given twice.
        written: The text of each plain (unquoted) scalar value that YAML read as
            something other than a string (``010`` -> 8), by its key path.
        written_keys: The same for mapping keys, by the key path they begin.
    """

    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)
    duplicates: list[tuple[KeyPath, int, int]] = field(default_factory=list)
    written: dict[KeyPath, str] = field(default_factory=dict)
    written_keys: dict[KeyPath, str] = field(default_factory=dict)

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
        yaml.YAMLError: The text is not valid YAML, or not data rtk reads: a tag
            ``yaml.safe_load`` does not know, a list or mapping as a key, an alias
            that contains itself, more than ``MAX_VALUES`` values or more than
            ``MAX_DEPTH`` levels.
    """
    _check_depth(text)
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    located = LocatedData(data=None)
    if root is None:
        return located
    located.lines[()] = root.start_mark.line + 1
    located.data = _Builder(located).build(root, ())
    return located


def _check_depth(text: str) -> None:
    """Refuse collections nested far deeper than ``MAX_DEPTH`` before they are composed.

    PyYAML composes nested collections recursively: thousands of levels end in a
    RecursionError, or not, as the interpreter's recursion limit of the moment allows
    (a library may have raised it). Its parser is not recursive: counting the open
    collections in its events refuses them the same way every time, with a line. What
    passes here the builder still holds to ``MAX_DEPTH`` exactly.
    """
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            depth += 1
            if depth > MAX_DEPTH + 1:
                mark = event.start_mark  # the pure-Python parser's (SafeLoader)
                raise ConstructorError(
                    None,
                    None,
                    f"nested deeper than {MAX_DEPTH} levels; no rtk file needs that",
                    mark if isinstance(mark, yaml.error.Mark) else None,
                )
        elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            depth -= 1


class _Builder:
    """One walk over a composed node tree (counts what it builds, detects cycles)."""

    def __init__(self, located: LocatedData) -> None:
        self.located = located
        self.loader = yaml.SafeLoader("")
        self.values = 0
        self.open: set[int] = set()  # ids of the collections being built (alias cycles)

    def build(self, node: yaml.Node, path: KeyPath) -> Any:
        self.values += 1
        if self.values > MAX_VALUES:
            raise ConstructorError(
                None,
                None,
                f"more than {MAX_VALUES:,} values (anchors and aliases count each time "
                "they are used); no rtk file needs that many",
                node.start_mark,
            )
        if len(path) > MAX_DEPTH:
            raise ConstructorError(
                None, None, f"nested deeper than {MAX_DEPTH} levels", node.start_mark
            )
        if isinstance(node, yaml.ScalarNode):
            value = self.scalar(node)
            if self._implicitly_typed(node, value):
                self.located.written[path] = node.value
            return value
        if id(node) in self.open:
            raise ConstructorError(
                None, None, "an alias refers to a collection that contains it", node.start_mark
            )
        self._check_tag(node)
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self.mapping(node, path)
            return [
                self._item(item_node, (*path, index)) for index, item_node in enumerate(node.value)
            ]
        finally:
            self.open.discard(id(node))

    def _item(self, node: yaml.Node, path: KeyPath) -> Any:
        self.located.lines[path] = node.start_mark.line + 1
        return self.build(node, path)

    def mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        merged: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG and isinstance(key_node, yaml.ScalarNode):
                merged.append(value_node)
                continue
            self.entry(result, key_node, value_node, path, merged=False)
        # Merge keys add what the mapping does not set itself; the first source wins.
        for source in merged:
            for mapping_node in self._merge_sources(source):
                for key_node, value_node in mapping_node.value:
                    self.entry(result, key_node, value_node, path, merged=True)
        return result

    def entry(
        self,
        result: dict[Any, Any],
        key_node: yaml.Node,
        value_node: yaml.Node,
        path: KeyPath,
        merged: bool,
    ) -> None:
        if not isinstance(key_node, yaml.ScalarNode):
            raise ConstructorError(
                None,
                None,
                "a key must be a plain value such as a name, not a list or mapping",
                key_node.start_mark,
            )
        if key_node.tag == MERGE_TAG:
            # A merge key inside a merged mapping: that mapping's own merges.
            for mapping_node in self._merge_sources(value_node):
                for inner_key, inner_value in mapping_node.value:
                    self.entry(result, inner_key, inner_value, path, merged=True)
            return
        key = self.scalar(key_node)
        child: KeyPath = (*path, path_part(key))
        line = key_node.start_mark.line + 1
        if key in result:
            if merged:
                return
            self.located.duplicates.append((child, self.located.lines[child], line))
        if self._implicitly_typed(key_node, key):
            self.located.written_keys[child] = key_node.value
        self.located.lines[child] = line
        result[key] = self.build(value_node, child)

    def _merge_sources(self, node: yaml.Node) -> list[yaml.MappingNode]:
        """The mappings a ``<<`` value names: one mapping, or a list of them."""
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                raise ConstructorError(
                    None,
                    None,
                    "a merge key (<<) takes a mapping or a list of mappings, such as <<: *defaults",
                    source.start_mark,
                )
        return list(sources)

    def scalar(self, node: yaml.ScalarNode) -> Any:
        if node.tag not in yaml.SafeLoader.yaml_constructors and self._implicit(node):
            # = and << resolve to YAML's value and merge tags, which build no data: text.
            return node.value
        self._check_tag(node)
        constructor = yaml.SafeLoader.yaml_constructors[node.tag]
        try:
            value = constructor(self.loader, node)
            if isinstance(value, types.GeneratorType):
                # A collection's constructor (!!set, !!omap) builds in steps; on a
                # scalar its first step fails, and is a YAML problem like the rest.
                steps, value = value, next(value)
                for _ in steps:
                    pass
            return value
        except Exception as e:  # PyYAML's constructors raise whatever int(), b64 etc. raise
            if self._implicit(node):
                # Looks like a date but is none (2024-02-30): it stays the text it is.
                return node.value
            raise ConstructorError(
                None, None, f"cannot read {node.value!r} as {_tag_name(node.tag)}", node.start_mark
            ) from e

    def _implicitly_typed(self, node: yaml.ScalarNode, value: Any) -> bool:
        """Whether YAML made a plain scalar a non-string by its look (not by a tag)."""
        return not isinstance(value, str) and self._implicit(node)

    def _implicit(self, node: yaml.ScalarNode) -> bool:
        """Whether a scalar is plain and its tag the one its look gives it."""
        return node.style is None and node.tag == self._implicit_tag(node)

    def _implicit_tag(self, node: yaml.ScalarNode) -> str:
        tag = self.loader.resolve(yaml.ScalarNode, node.value, (True, False))  # type: ignore[no-untyped-call]
        return str(tag)

    @staticmethod
    def _check_tag(node: yaml.Node) -> None:
        if node.tag not in yaml.SafeLoader.yaml_constructors:
            raise ConstructorError(
                None,
                None,
                f"unknown tag {node.tag!r}; remove it (rtk reads plain YAML data)",
                node.start_mark,
            )


def path_part(key: Any) -> str | int:
    """How a mapping key appears in a ``KeyPath``: itself if a string or int, else its str."""
    return key if isinstance(key, str | int) else str(key)


def _tag_name(tag: str) -> str:
    return tag.removeprefix("tag:yaml.org,2002:")
