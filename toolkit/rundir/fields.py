"""Reading and writing a run directory's JSON records, with errors that name the file.

``Fields`` reads one JSON object's fields by type; a wrong one raises ``RunDirError``
naming the file, the key path, the value given and what was expected.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeGuard

from toolkit.errors import RunDirError


def read_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``.

    Raises:
        RunDirError: The file is missing, unreadable, not JSON or not an object.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RunDirError(f"{path}: unreadable ({e})") from e
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def write_object(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as indented JSON, replacing ``path`` at once (never half written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(temp, path)


def is_number(value: object) -> TypeGuard[int | float]:
    """A finite int or float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class Fields:
    """Typed access to one JSON object's fields; errors name ``where`` and the key."""

    def __init__(self, data: object, where: str) -> None:
        """Wrap ``data``, which must be a JSON object.

        Raises:
            RunDirError: ``data`` is not an object.
        """
        if not isinstance(data, Mapping):
            raise RunDirError(f"{where}: expected a JSON object, got {data!r}")
        self.data: Mapping[str, Any] = data
        self.where = where

    def fail(self, key: str, expected: str) -> RunDirError:
        """The error for ``key`` not being ``expected``."""
        return RunDirError(f"{self.where}: {key}: expected {expected}, got {self.data.get(key)!r}")

    def text(self, key: str) -> str:
        """A required string."""
        value = self.data.get(key)
        if not isinstance(value, str):
            raise self.fail(key, "text")
        return value

    def optional_text(self, key: str) -> str | None:
        """A string or null (absent: None)."""
        value = self.data.get(key)
        if value is not None and not isinstance(value, str):
            raise self.fail(key, "text or null")
        return value

    def number(self, key: str) -> float:
        """A required finite number."""
        value = self.data.get(key)
        if not is_number(value):
            raise self.fail(key, "a number")
        return float(value)

    def optional_number(self, key: str) -> float | None:
        """A finite number or null (absent: None)."""
        value = self.data.get(key)
        if value is None:
            return None
        if not is_number(value):
            raise self.fail(key, "a number or null")
        return float(value)

    def integer(self, key: str, default: int | None = None) -> int:
        """A required integer (``default`` when absent, if given)."""
        value = self.data.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(key, "an integer")
        return value

    def optional_integer(self, key: str) -> int | None:
        """An integer or null (absent: None)."""
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(key, "an integer or null")
        return value

    def optional_bool(self, key: str) -> bool | None:
        """true, false or null (absent: None)."""
        value = self.data.get(key)
        if value is not None and not isinstance(value, bool):
            raise self.fail(key, "true, false or null")
        return value

    def obj(self, key: str) -> dict[str, Any]:
        """A required object."""
        value = self.data.get(key)
        if not isinstance(value, dict):
            raise self.fail(key, "an object")
        return value

    def optional_obj(self, key: str) -> dict[str, Any] | None:
        """An object or null (absent: None)."""
        value = self.data.get(key)
        if value is not None and not isinstance(value, dict):
            raise self.fail(key, "an object or null")
        return value

    def text_list(self, key: str) -> list[str]:
        """A required list of strings."""
        value = self.data.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, "a list of text")
        return list(value)

    def version(self, supported: int) -> None:
        """Check the record's ``v`` (absent: taken as ``supported``)."""
        if self.data.get("v", supported) != supported:
            raise self.fail("v", f"version {supported}")

    def inner(self, key: str) -> Fields | None:
        """The object at ``key`` as ``Fields`` (None when null or absent)."""
        value = self.optional_obj(key)
        return None if value is None else Fields(value, f"{self.where}: {key}")
