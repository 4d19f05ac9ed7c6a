"""Progress of bring-up and teardown that fits a screen at any node count.

``ProgressReporter`` counts nodes per phase (probed, started, joined, stopped, failed)
from the cluster's phase events and shows the counts instead of a line per node per
step (``rtk up`` on 1,024 nodes printed about 4,100 lines that way):

- on a terminal, a live block on stderr, one line per phase with its count and a bar,
  redrawn a few times a second, with the cluster's messages printed above it;
- elsewhere (CI, logs, pipes), plain lines: a count line when a phase crosses a quarter
  of the nodes, or after a pause that grows with the elapsed time (at least 5 s), so a
  long bring-up stays within a few dozen lines;
- with ``--verbose``, every node's line as ``ConsoleReporter`` prints it.

Small clusters (``SMALL_CLUSTER`` nodes or fewer) keep their per-node lines. When it
closes, the failures are listed grouped by cause (``toolkit.cluster.node_groups``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from toolkit.cli.options.decorators import ConsoleReporter
from toolkit.cluster.node_groups import group_nodes, render_failure_groups
from toolkit.cluster.progress_reporter import PHASES, Phase

SMALL_CLUSTER = 8
REFRESH_S = 0.25
PLAIN_MIN_PAUSE_S = 5.0
# A plain count line at most every max(5 s, elapsed / PLAIN_PAUSE_DIVISOR): about
# 8 * ln(T / 40 s) + 8 lines over T seconds, 20 for 6 minutes, 33 for an hour.
PLAIN_PAUSE_DIVISOR = 8.0
QUARTERS = (0.25, 0.5, 0.75, 1.0)
BAR_CHARS = 24

Clock = Callable[[], float]


def is_terminal(stream: TextIO) -> bool:
    """True when ``stream`` is a terminal that understands cursor movement."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM", "") != "dumb"


class ProgressReporter:
    """A ``Reporter`` that counts nodes per phase and shows the counts (module doc).

    Use it as a context manager around the operation: entering starts the live display
    on a terminal, leaving (also on Ctrl-C or an error) draws the final counts and
    prints the failures grouped by cause.
    """

    def __init__(
        self,
        total: int = 0,
        *,
        verbose: bool = False,
        stream: TextIO | None = None,
        live: bool | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        """Prepare the display; nothing is printed yet.

        Args:
            total: How many nodes the operation covers (``expect`` can set it later).
            verbose: Print every node's line, as ``ConsoleReporter`` does.
            stream: Where progress goes (default: stderr).
            live: Redraw a live block (default: when ``stream`` is a terminal).
            clock: Seconds from a fixed point (tests pass their own).
        """
        self.stream: TextIO = stream if stream is not None else sys.stderr
        terminal = is_terminal(self.stream) if live is None else live
        self.verbose = verbose
        self.live = terminal and not verbose  # --verbose prints lines, draws no block
        self.total = total
        self.clock = clock
        self.began = clock()
        self.counts: dict[Phase, int] = dict.fromkeys(PHASES, 0)
        self.failures: dict[str, str] = {}
        self._seen: dict[Phase, set[str]] = {p: set() for p in PHASES}
        self._lock = threading.RLock()
        self._drawn = 0  # lines of the live block on screen now
        self._shown = tuple(self.counts.values())
        self._last_line_at = self.began
        self._passed: dict[Phase, int] = dict.fromkeys(PHASES, 0)  # quarters announced
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._lines = ConsoleReporter(stream=self.stream, clock=clock)
        self._lines.began = self.began
        self.closed = False

    # The Reporter protocol.

    def node(self, name: str, message: str) -> None:
        """A node's detail: shown with ``--verbose`` or on a small cluster."""
        if self.per_node:
            with self._lock:
                self._above(lambda: self._lines.node(name, message))

    def detail(self, name: str, text: str) -> None:
        """The text behind a node's failure: shown with ``--verbose`` only."""
        if self.verbose:
            with self._lock:
                self._above(lambda: self._lines.detail(name, text))

    def info(self, message: str) -> None:
        """A message about the whole cluster: always shown."""
        with self._lock:
            self._above(lambda: self._lines.info(message))

    def phase(self, name: str, phase: Phase, detail: str = "") -> None:
        """Count ``name`` in ``phase``; a failure keeps its cause for the end.

        A node reaching a phase it had reached before (not ``failed``) starts a new
        round: a flow that brings the cluster up again (``rtk profile``'s sweep) sees
        each bring-up counted from zero, the last one's end shown first.
        """
        with self._lock:
            if name in self._seen[phase]:
                if phase == "failed":
                    self.failures[name] = detail or self.failures[name]
                    return
                self._end_round()
            self._seen[phase].add(name)
            self.counts[phase] += 1
            if phase == "failed":
                self.failures[name] = detail
            if self.closed:
                return
            if self.live:
                self._redraw(force=False)
            elif not self.per_node:
                self._maybe_count_line()

    # Set-up and the end.

    @property
    def per_node(self) -> bool:
        """True when every node line is printed (``--verbose``, or a small cluster)."""
        return self.verbose or 0 < self.total <= SMALL_CLUSTER

    def expect(self, total: int) -> None:
        """The operation covers ``total`` nodes (known once the plan is)."""
        with self._lock:
            self.total = total

    def __enter__(self) -> ProgressReporter:
        if self.live:
            self._ticker = threading.Thread(target=self._tick, name="rtk-progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop redrawing; leave the final counts and the failures grouped by cause."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            self._end_round()

    def _end_round(self) -> None:
        """Show the last counts and the failures by cause; count from zero after."""
        if self.live and (self._drawn or self._changed()):
            self._redraw(force=True)
        elif not self.live and not self.per_node and self._changed():
            self._count_line()
        self._drawn = 0
        self._write_lines(render_failure_groups(group_nodes(self.failures.items())))
        self.counts = dict.fromkeys(PHASES, 0)
        self.failures = {}
        self._seen = {p: set() for p in PHASES}
        self._passed = dict.fromkeys(PHASES, 0)
        self._shown = tuple(self.counts.values())

    # Showing.

    def summary(self) -> str:
        """The counts in one line: ``probed 1024/1024, started 1023/1024, failed 1``."""
        total = max(self.total, self._nodes_seen())
        parts = [
            f"{phase} {self.counts[phase]}" + ("" if phase == "failed" else f"/{total}")
            for phase in self._phases_shown()
        ]
        return ", ".join(parts) or "no node reported yet"

    def block(self) -> list[str]:
        """The live block: one line per phase with count/total and a bar."""
        total = max(self.total, self._nodes_seen())
        full, empty = ("█", "░") if _unicode(self.stream) else ("#", "-")
        lines = []
        for phase in self._phases_shown():
            count = self.counts[phase]
            if phase == "failed":
                lines.append(f"  {phase:<8} {count:>{len(str(total))}}")
                continue
            filled = round(BAR_CHARS * count / total) if total else 0
            bar = full * filled + empty * (BAR_CHARS - filled)
            lines.append(f"  {phase:<8} {count:>{len(str(total))}}/{total} {bar}")
        lines.append(f"  {self.clock() - self.began:.1f} s")
        return lines

    def _phases_shown(self) -> list[Phase]:
        """The phases that happened, in their order; ``failed`` once a node failed."""
        return [p for p in PHASES if self.counts[p]]

    def _nodes_seen(self) -> int:
        return len(set().union(*self._seen.values()))

    def _changed(self) -> bool:
        return tuple(self.counts.values()) != self._shown

    def _tick(self) -> None:
        while not self._stop.wait(REFRESH_S):
            with self._lock:
                if self._drawn:  # the block appears with the first count
                    self._redraw(force=True)

    def _redraw(self, force: bool) -> None:
        """Draw the block over the one on screen (live mode; the caller holds the lock)."""
        now = self.clock()
        if not force and self._drawn and now - self._last_line_at < REFRESH_S:
            return
        self._last_line_at = now
        self._shown = tuple(self.counts.values())
        lines = self.block()
        out = _up(self._drawn) + "".join(f"\x1b[2K{line}\n" for line in lines)
        if len(lines) < self._drawn:
            out += "\x1b[J"
        self.stream.write(out)
        self.stream.flush()
        self._drawn = len(lines)

    def _above(self, show: Callable[[], None]) -> None:
        """Print a line above the live block (or plainly); the caller holds the lock."""
        if self.live and self._drawn:
            self.stream.write(_up(self._drawn) + "\x1b[J")
            self._drawn = 0
            show()
            self._redraw(force=True)
        else:
            show()

    def _maybe_count_line(self) -> None:
        """Plain mode: a count line at a quarter crossed or after a long enough pause."""
        total = max(self.total, 1)
        crossed = False
        for phase in PHASES:
            if phase == "failed":
                continue
            passed = sum(self.counts[phase] >= q * total for q in QUARTERS)
            if passed > self._passed[phase]:
                self._passed[phase] = passed
                crossed = True
        now = self.clock()
        pause_s = max(PLAIN_MIN_PAUSE_S, (now - self.began) / PLAIN_PAUSE_DIVISOR)
        if crossed or now - self._last_line_at >= pause_s:
            self._count_line()

    def _count_line(self) -> None:
        self._last_line_at = self.clock()
        self._shown = tuple(self.counts.values())
        self._lines.info(self.summary())

    def _write_lines(self, lines: list[str]) -> None:
        for line in lines:
            self.stream.write(line + "\n")
        self.stream.flush()


def _up(lines: int) -> str:
    """Move the cursor to the start of the line ``lines`` lines up."""
    return f"\x1b[{lines}F" if lines else ""


def _unicode(stream: TextIO) -> bool:
    encoding = getattr(stream, "encoding", None) or ""
    return encoding.lower().replace("-", "") in ("utf8", "utf16", "utf32")


def progress_reporter(
    verbose: bool = False, total: int = 0, live: bool | None = None
) -> ProgressReporter:
    """The reporter the CLI commands use: live on a terminal, bounded lines elsewhere.

    ``live=False`` where other output (a job's log) is printed while it reports: a block
    redrawn in place would write over those lines.
    """
    return ProgressReporter(total, verbose=verbose, live=live)
