"""Reading a node script's JSON answer into typed records, field by field.

The node scripts print plain JSON (they are stdlib only); the host parses each answer
once, where it is read, with ``Fields``. A field of the wrong type, or a required
field that is missing, raises one error that names the node, the answer and the
field's path, and shows the value given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolkit.errors import ClusterError


class Fields:
    """A JSON object of a node's answer, read with type checks.

    Args:
        node: The node's name (every error starts with it).
        what: Which answer this is, for errors (``probe``, ``preflight facts``).
        data: The object.
        path: Where ``data`` sits in the answer (``route``, ``gpus.devices.GPU-1``).
    """

    def __init__(self, node: str, what: str, data: Any, path: str = "") -> None:
        self.node = node
        self.what = what
        self.path = path
        if not isinstance(data, Mapping):
            raise self.error(path or "(the answer)", "an object", data)
        self.data: Mapping[str, Any] = data

    def error(self, path: str, expected: str, value: Any) -> ClusterError:
        """The error for a field at ``path`` that is not ``expected``."""
        given = "missing" if value is _MISSING else f"got {value!r:.80}"
        return ClusterError(
            f"{self.node}: malformed {self.what} from the node: "
            f"field {path!r} should be {expected}, {given}"
        )

    def _path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def _get(self, key: str, required: bool, expected: str) -> Any:
        value = self.data.get(key, _MISSING)
        if value is _MISSING and required:
            raise self.error(self._path(key), expected, value)
        return None if value is _MISSING else value

    def has(self, key: str) -> bool:
        """Whether the object has ``key`` at all (an absent fact, not a null one)."""
        return key in self.data

    def text(self, key: str) -> str:
        """A required string."""
        value = self._get(key, True, "a string")
        if not isinstance(value, str):
            raise self.error(self._path(key), "a string", value)
        return value

    def text_or_none(self, key: str) -> str | None:
        """A string, null or absent."""
        value = self._get(key, False, "a string")
        if value is not None and not isinstance(value, str):
            raise self.error(self._path(key), "a string or null", value)
        return value

    def integer(self, key: str) -> int:
        """A required integer."""
        value = self._get(key, True, "an integer")
        if value is None or isinstance(value, bool) or not isinstance(value, int):
            raise self.error(self._path(key), "an integer", value)
        return value

    def integer_or_none(self, key: str) -> int | None:
        """An integer, null or absent."""
        value = self._get(key, False, "an integer or null")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise self.error(self._path(key), "an integer or null", value)
        return value

    def number(self, key: str) -> float:
        """A required number (an integer is taken as a float)."""
        value = self._get(key, True, "a number")
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(self._path(key), "a number", value)
        return float(value)

    def number_or_none(self, key: str) -> float | None:
        """A number, null or absent."""
        value = self._get(key, False, "a number or null")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(self._path(key), "a number or null", value)
        return float(value)

    def flag(self, key: str, required: bool = False) -> bool:
        """A boolean; absent or null (unless ``required``) is false."""
        value = self.flag_or_none(key, required)
        if value is None and required:
            raise self.error(self._path(key), "true or false", None)
        return bool(value)

    def flag_or_none(self, key: str, required: bool = False) -> bool | None:
        """A boolean, null or (unless ``required``) absent."""
        value = self._get(key, required, "true or false")
        if value is not None and not isinstance(value, bool):
            raise self.error(self._path(key), "true or false", value)
        return value

    def items(self, key: str, expected: str, required: bool = False) -> list[Any] | None:
        """A list (its items unchecked), null or (unless ``required``) absent."""
        value = self._get(key, required, f"a list of {expected}")
        if value is not None and not isinstance(value, list):
            raise self.error(self._path(key), f"a list of {expected}", value)
        return value

    def texts(self, key: str, required: bool = False) -> tuple[str, ...]:
        """A list of strings; absent or null (unless ``required``) is empty."""
        values = self.items(key, "strings", required) or []
        for i, value in enumerate(values):
            if not isinstance(value, str):
                raise self.error(f"{self._path(key)}[{i}]", "a string", value)
        return tuple(values)

    def integers(self, key: str, required: bool = False) -> tuple[int, ...]:
        """A list of integers; absent or null (unless ``required``) is empty."""
        values = self.items(key, "integers", required) or []
        for i, value in enumerate(values):
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.error(f"{self._path(key)}[{i}]", "an integer", value)
        return tuple(values)

    def flags(self, key: str) -> tuple[bool, ...]:
        """A list of booleans; absent or null is empty."""
        values = self.items(key, "booleans") or []
        for i, value in enumerate(values):
            if not isinstance(value, bool):
                raise self.error(f"{self._path(key)}[{i}]", "true or false", value)
        return tuple(values)

    def nested(self, key: str, required: bool = False) -> Fields | None:
        """The object at ``key``, to read further; None when null or (unless required) absent."""
        value = self._get(key, required, "an object")
        if value is None:
            return None
        return Fields(self.node, self.what, value, self._path(key))

    def required(self, key: str) -> Fields:
        """The object at ``key``, to read further; it must be there."""
        value = self._get(key, True, "an object")
        return Fields(self.node, self.what, value, self._path(key))

    def text_map(self, key: str) -> dict[str, str]:
        """An object of strings (errors by what); absent or null is empty."""
        found = self.nested(key)
        if found is None:
            return {}
        return {k: found.text(k) for k in found.data}

    def children(self, key: str) -> dict[str, Fields]:
        """An object of objects, each to read further; absent or null is empty."""
        found = self.nested(key)
        if found is None:
            return {}
        return {k: Fields(self.node, self.what, v, found._path(k)) for k, v in found.data.items()}


_MISSING: Any = object()
