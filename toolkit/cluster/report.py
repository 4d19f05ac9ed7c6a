"""Progress reporting for long cluster operations, kept apart from how it is shown."""

from __future__ import annotations

from typing import Protocol


class Reporter(Protocol):
    """Receives progress as it happens; the CLI prints it, tests collect it."""

    def node(self, name: str, message: str) -> None:
        """Something happened on node ``name``."""

    def info(self, message: str) -> None:
        """Something happened to the cluster as a whole."""
