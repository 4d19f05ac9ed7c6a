"""Progress reporting for long cluster operations, kept apart from how it is shown.

Three kinds of event: free text (``node``, ``info``: details, shown with ``--verbose``
or on a small cluster), a node reaching a phase (``phase``): what a display counts at
any node count (probed, started, joined, stopped; failed with its cause), and the
text a failure's cause was read from (``detail``: Ray's traceback and log lines,
shown with ``--verbose`` only).
"""

from __future__ import annotations

from typing import Literal, Protocol

Phase = Literal["probed", "started", "joined", "stopped", "failed"]
PHASES: tuple[Phase, ...] = ("probed", "started", "joined", "stopped", "failed")


class Reporter(Protocol):
    """Receives progress as it happens; the CLI prints it, tests collect it."""

    def node(self, name: str, message: str) -> None:
        """Something happened on node ``name``."""

    def info(self, message: str) -> None:
        """Something happened to the cluster as a whole."""

    def phase(self, name: str, phase: Phase, detail: str = "") -> None:
        """Node ``name`` reached ``phase``; for ``failed``, ``detail`` is the cause."""

    def detail(self, name: str, text: str) -> None:
        """The text behind node ``name``'s failure (several lines; ``--verbose`` only)."""


class QuietReporter:
    """A reporter that drops everything (when the caller gives none); a base for others."""

    def node(self, name: str, message: str) -> None:
        """Drop a node's progress."""

    def info(self, message: str) -> None:
        """Drop the cluster's progress."""

    def phase(self, name: str, phase: Phase, detail: str = "") -> None:
        """Drop a node's phase."""

    def detail(self, name: str, text: str) -> None:
        """Drop a failure's text."""
