"""One reader of a JSON object's fields by type, for every JSON answer and record rtk reads.

``Fields`` checks each field's type where it is read. What a wrong field raises is
decided by the ``Errors`` given at construction: the run directory's records name
the file (``RunDirError``), a node's answers name the node (``ClusterError``). Each
``Errors`` also says, in its ``Words``, how it names what a field should be.

Missing and null: a required field may be neither; an ``_or_none`` field may be
either and reads as None; a list read without ``required`` reads as empty when
missing or null. ``has`` tells a missing field from a null one. Numbers are finite
ints or floats, never booleans; integers are never booleans either.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, TypeGuard

from toolkit.errors import RtkError

Key = str | int
"""One step of a path into a JSON value: an object's key or a list's index."""

FieldPath = tuple[Key, ...]
"""Where a value sits in the JSON a reader was given (empty: the whole of it)."""


class _Missing:
    """The value of a field that is not there at all (not even null)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final[Any] = _Missing()
"""The value an ``Errors`` is given for a field that is absent."""


def is_number(value: object) -> TypeGuard[int | float]:
    """A finite int or float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_integer(value: object) -> TypeGuard[int]:
    """An int, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Words:
    """How one kind of error names what a field should be, for each reader method."""

    root: str = "an object"
    obj: str = "an object"
    obj_or_null: str = "an object or null"
    text: str = "a string"
    text_or_null: str = "a string or null"
    number: str = "a number"
    number_or_null: str = "a number or null"
    integer: str = "an integer"
    integer_or_null: str = "an integer or null"
    flag: str = "true or false"
    flag_or_null: str = "true, false or null"
    texts: str = "a list of strings"
    integers: str = "a list of integers"
    flags: str = "a list of booleans"
    objects: str = "a list of objects"


class Errors(ABC):
    """The strategy that makes a reader's errors: its words and its exception."""

    words: ClassVar[Words] = Words()

    @abstractmethod
    def error(self, path: FieldPath, expected: str, value: Any) -> RtkError:
        """The error for the value at ``path`` not being ``expected``.

        Args:
            path: Where the value sits (empty: the whole JSON value).
            expected: What it should be, in this strategy's words.
            value: What it is; ``MISSING`` when the field is absent.
        """

    def wrong_item(
        self, path: FieldPath, expected: str, values: list[Any], index: int, item: str
    ) -> RtkError:
        """The error for one item of the list at ``path``; by default it names the item.

        Args:
            path: Where the list sits.
            expected: What the list should be (``a list of strings``).
            values: The list.
            index: Which item is wrong.
            item: What each item should be (``a string``).
        """
        return self.error((*path, index), item, values[index])


class Fields:
    """A JSON object, read field by field with type checks.

    Args:
        data: The object (anything else raises ``errors``' error at ``path``).
        errors: Makes the errors, in its own words.
        path: Where ``data`` sits in the JSON value first read (empty: it is that value).

    Raises:
        RtkError: ``data`` is not an object (the error ``errors`` makes).
    """

    def __init__(self, data: Any, errors: Errors, path: FieldPath = ()) -> None:
        self.errors = errors
        self.words = errors.words
        self.path = path
        if not isinstance(data, Mapping):
            raise errors.error(path, self.words.obj if path else self.words.root, data)
        self.data: Mapping[str, Any] = data

    def has(self, key: str) -> bool:
        """Whether the object has ``key`` at all (an absent field, not a null one)."""
        return key in self.data

    def fail(self, key: str, expected: str) -> RtkError:
        """The error for the field ``key``, as it is, not being ``expected``."""
        return self.errors.error((*self.path, key), expected, self.data.get(key, MISSING))

    def _required(self, key: str, expected: str) -> Any:
        value = self.data.get(key, MISSING)
        if value is MISSING or value is None:
            raise self.fail(key, expected)
        return value

    def text(self, key: str) -> str:
        """A string."""
        value = self._required(key, self.words.text)
        if not isinstance(value, str):
            raise self.fail(key, self.words.text)
        return value

    def text_or_none(self, key: str) -> str | None:
        """A string; None when null or missing."""
        value = self.data.get(key)
        if value is not None and not isinstance(value, str):
            raise self.fail(key, self.words.text_or_null)
        return value

    def number(self, key: str) -> float:
        """A finite number (an integer is taken as a float)."""
        value = self._required(key, self.words.number)
        if not is_number(value):
            raise self.fail(key, self.words.number)
        return float(value)

    def number_or_none(self, key: str) -> float | None:
        """A finite number; None when null or missing."""
        value = self.data.get(key)
        if value is None:
            return None
        if not is_number(value):
            raise self.fail(key, self.words.number_or_null)
        return float(value)

    def integer(self, key: str) -> int:
        """An integer."""
        value = self._required(key, self.words.integer)
        if not is_integer(value):
            raise self.fail(key, self.words.integer)
        return value

    def integer_or_none(self, key: str) -> int | None:
        """An integer; None when null or missing."""
        value = self.data.get(key)
        if value is not None and not is_integer(value):
            raise self.fail(key, self.words.integer_or_null)
        return value

    def flag(self, key: str) -> bool:
        """A boolean: true or false."""
        value = self._required(key, self.words.flag)
        if not isinstance(value, bool):
            raise self.fail(key, self.words.flag)
        return value

    def flag_or_none(self, key: str) -> bool | None:
        """A boolean; None when null or missing."""
        value = self.data.get(key)
        if value is not None and not isinstance(value, bool):
            raise self.fail(key, self.words.flag_or_null)
        return value

    def obj(self, key: str) -> dict[str, object]:
        """An object, as it is (unchecked inside: read it with ``nested`` to check it)."""
        value = self._required(key, self.words.obj)
        if not isinstance(value, dict):
            raise self.fail(key, self.words.obj)
        return value

    def obj_or_none(self, key: str) -> dict[str, object] | None:
        """An object, as it is (unchecked inside); None when null or missing."""
        value = self.data.get(key)
        if value is not None and not isinstance(value, dict):
            raise self.fail(key, self.words.obj_or_null)
        return value

    def nested(self, key: str) -> Fields:
        """The object at ``key``, to read further (errors name its path)."""
        return Fields(self._required(key, self.words.obj), self.errors, (*self.path, key))

    def nested_or_none(self, key: str) -> Fields | None:
        """The object at ``key``, to read further; None when null or missing."""
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self.fail(key, self.words.obj_or_null)
        return Fields(value, self.errors, (*self.path, key))

    def children(self, key: str) -> dict[str, Fields]:
        """An object of objects, each to read further; empty when null or missing."""
        found = self.nested_or_none(key)
        if found is None:
            return {}
        return {k: Fields(v, self.errors, (*found.path, k)) for k, v in found.data.items()}

    def objects(self, key: str) -> list[Fields]:
        """A list of objects, each to read further; empty when null or missing."""
        values = self._list(key, self.words.objects, False)
        return [Fields(v, self.errors, (*self.path, key, i)) for i, v in enumerate(values)]

    def text_map(self, key: str) -> dict[str, str]:
        """An object of strings; empty when null or missing."""
        found = self.nested_or_none(key)
        return {} if found is None else {k: found.text(k) for k in found.data}

    def _list(self, key: str, expected: str, required: bool) -> list[Any]:
        value = self._required(key, expected) if required else self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(key, expected)
        return value

    def texts(self, key: str, required: bool = False) -> tuple[str, ...]:
        """A list of strings; empty when null or missing, unless ``required``."""
        values = self._list(key, self.words.texts, required)
        for index, value in enumerate(values):
            if not isinstance(value, str):
                raise self._wrong_item(key, self.words.texts, values, index, self.words.text)
        return tuple(values)

    def integers(self, key: str, required: bool = False) -> tuple[int, ...]:
        """A list of integers; empty when null or missing, unless ``required``."""
        values = self._list(key, self.words.integers, required)
        for index, value in enumerate(values):
            if not is_integer(value):
                raise self._wrong_item(key, self.words.integers, values, index, self.words.integer)
        return tuple(values)

    def flags(self, key: str, required: bool = False) -> tuple[bool, ...]:
        """A list of booleans; empty when null or missing, unless ``required``."""
        values = self._list(key, self.words.flags, required)
        for index, value in enumerate(values):
            if not isinstance(value, bool):
                raise self._wrong_item(key, self.words.flags, values, index, self.words.flag)
        return tuple(values)

    def _wrong_item(
        self, key: str, expected: str, values: list[Any], index: int, item: str
    ) -> RtkError:
        return self.errors.wrong_item((*self.path, key), expected, values, index, item)
