"""Where the seconds of ``rtk up`` go: each phase's span, measured where it runs.

Phases overlap (nodes are probed while the head starts; workers start while others
are still probed), so each is a span from the command's beginning, not a share of it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from toolkit.json_types import JsonObject


@dataclass(frozen=True)
class PhaseSpan:
    """One phase: from its first operation's beginning to its last one's end.

    Attributes:
        start_s: Seconds after the command began.
        end_s: Seconds after the command began.
        count: Operations in it (nodes probed, workers started, polls of Ray).
    """

    start_s: float
    end_s: float
    count: int

    @property
    def duration_s(self) -> float:
        """From the first beginning to the last end."""
        return self.end_s - self.start_s

    def to_json(self) -> JsonObject:
        """A JSON-ready dict."""
        return {
            "start_s": round(self.start_s, 3),
            "end_s": round(self.end_s, 3),
            "duration_s": round(self.duration_s, 3),
            "count": self.count,
        }


@dataclass(frozen=True)
class UpTimings:
    """The phases of one ``rtk up``; a phase that did not run is None.

    Attributes:
        probe: Every node's probe and file puts (count: nodes).
        head_start: The head's ``ray start``.
        worker_starts: Workers' ``ray start``, the first's beginning to the last's end.
        wait: The wait loop until the nodes joined (count: polls of Ray's node list).
        total_s: The whole bring-up.
        start_waves: Waves the worker starts were paced in.
    """

    probe: PhaseSpan | None
    head_start: PhaseSpan | None
    worker_starts: PhaseSpan | None
    wait: PhaseSpan | None
    total_s: float
    start_waves: int = 0

    def to_json(self) -> JsonObject:
        """A JSON-ready dict (``rtk up --json``, key ``timings``)."""
        return {
            "probe": self.probe.to_json() if self.probe else None,
            "head_start": self.head_start.to_json() if self.head_start else None,
            "worker_starts": self.worker_starts.to_json() if self.worker_starts else None,
            "start_waves": self.start_waves,
            "wait": self.wait.to_json() if self.wait else None,
            "total_s": round(self.total_s, 3),
        }

    def render(self) -> str:
        """A few aligned lines (``rtk up --timings``)."""
        rows: list[tuple[str, PhaseSpan | None, str]] = [
            ("probe + files", self.probe, "node(s)"),
            ("head start", self.head_start, ""),
            ("worker starts", self.worker_starts, f"worker(s), {self.start_waves} wave(s)"),
            ("wait loop", self.wait, "poll(s)"),
        ]
        return render_phases(rows, self.total_s)


def render_phases(rows: Sequence[tuple[str, PhaseSpan | None, str]], total_s: float) -> str:
    """A table of phases: label, from, to and took seconds, what it counted; then the total.

    Each row is ``(label, span or None when the phase did not run, unit of its count)``;
    an empty unit prints no count.
    """
    lines = [f"{'phase':<14} {'from s':>8} {'to s':>8} {'took s':>8}"]
    for label, span, unit in rows:
        if span is None:
            lines.append(f"{label:<14} {'-':>8} {'-':>8} {'-':>8}")
            continue
        what = f"  {span.count} {unit}" if unit else ""
        lines.append(
            f"{label:<14} {span.start_s:>8.2f} {span.end_s:>8.2f} {span.duration_s:>8.2f}{what}"
        )
    lines.append(f"{'total':<14} {0.0:>8.2f} {total_s:>8.2f} {total_s:>8.2f}")
    return "\n".join(lines) + "\n"


class SpanClock:
    """Collects one phase's operations from many threads into a ``PhaseSpan``."""

    def __init__(self, origin: float) -> None:
        """Spans count from ``origin`` (a ``time.monotonic()``)."""
        self._origin = origin
        self._lock = threading.Lock()
        self._first: float | None = None
        self._last: float | None = None
        self._count = 0

    def add(self, began: float, ended: float | None = None) -> None:
        """One operation from ``began`` to ``ended`` (default: now), monotonic seconds."""
        end = time.monotonic() if ended is None else ended
        with self._lock:
            self._first = began if self._first is None else min(self._first, began)
            self._last = end if self._last is None else max(self._last, end)
            self._count += 1

    def span(self) -> PhaseSpan | None:
        """The phase so far; None when nothing ran in it."""
        with self._lock:
            if self._first is None or self._last is None:
                return None
            return PhaseSpan(self._first - self._origin, self._last - self._origin, self._count)
