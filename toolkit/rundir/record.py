"""The base of every run-directory record: to and from JSON, read from and written to a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

from toolkit.rundir.fields import read_object, write_object


class Record:
    """A typed record of one JSON file; subclasses define ``to_json`` and ``from_json``."""

    def to_json(self) -> dict[str, Any]:
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
