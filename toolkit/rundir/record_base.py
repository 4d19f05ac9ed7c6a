"""The base of every run-directory record: to and from JSON, read from and written to a file.

A record's fields are read with ``toolkit.fields.Fields``; ``record_fields`` gives it
the run directory's errors (``RunDirError`` naming the file, the key, what was
expected and the value given).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

from toolkit.errors import RunDirError
from toolkit.fields import MISSING, Errors, FieldPath, Fields, Words
from toolkit.json_types import JsonObject


class RecordErrors(Errors):
    """Errors for a record's fields: ``WHERE: KEY: expected EXPECTED, got VALUE``.

    A missing field reads as None, and a list with a wrong item is shown whole.

    Args:
        where: The file (or the part of it) the record came from.
    """

    words: ClassVar[Words] = Words(
        root="a JSON object",
        text="text",
        text_or_null="text or null",
        texts="a list of text",
    )

    def __init__(self, where: str) -> None:
        self.where = where

    def error(self, path: FieldPath, expected: str, value: Any) -> RunDirError:
        """``WHERE: KEY: expected EXPECTED, got VALUE`` (a missing value shows as None)."""
        keys = "".join(f": {key}" for key in path)
        given = None if value is MISSING else value
        return RunDirError(f"{self.where}{keys}: expected {expected}, got {given!r}")

    def wrong_item(
        self, path: FieldPath, expected: str, values: list[Any], index: int, item: str
    ) -> RunDirError:
        """The list is named and shown whole."""
        return self.error(path, expected, values)


def record_fields(data: object, where: str) -> Fields:
    """``data``, a record's JSON object, to read with errors naming ``where``.

    Raises:
        RunDirError: ``data`` is not an object.
    """
    return Fields(data, RecordErrors(where))


def check_version(f: Fields, supported: int) -> None:
    """Check the record's ``v`` (absent: taken as ``supported``).

    Raises:
        RunDirError: It is another version.
    """
    if f.data.get("v", supported) != supported:
        raise f.fail("v", f"version {supported}")


def read_object(path: Path) -> dict[str, object]:
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


class Record:
    """A typed record of one JSON file; subclasses define ``to_json`` and ``from_json``."""

    def to_json(self) -> JsonObject:
        """The record as a JSON-ready dict."""
        raise NotImplementedError

    @classmethod
    def from_json(cls, data: object, where: str) -> Self:
        """The record from what ``to_json`` gave; ``where`` names it in errors.

        Raises:
            toolkit.errors.RunDirError: A field is missing or of the wrong type.
        """
        raise NotImplementedError

    @classmethod
    def read(cls, path: Path) -> Self:
        """The record in ``path``.

        Raises:
            toolkit.errors.RunDirError: The file is unreadable, or a field is wrong (the
                message names the file).
        """
        return cls.from_json(read_object(path), str(path))

    def write(self, path: Path) -> None:
        """Write the record to ``path`` at once (never half written)."""
        write_object(path, self.to_json())
