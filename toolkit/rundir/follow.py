"""Following a run's marker files as they grow: what a job driver watches, read once.

``MarkerFollower`` reads what was appended to every marker file of a run since its last
``poll``, complete lines only, and gives the lines a watcher acts on (a finished step,
a phase's start, a checkpoint) as ``Progress``. The stall watchdog, ``rtk stall-check``
and the power policy follow the ranks with it. Its cost is a ``stat`` per file and a
read of what was appended, at most ``READ_MAX_BYTES`` of a file per poll.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from toolkit.rundir.layout import RunDir

READ_MAX_BYTES = 4 << 20  # of one marker file per poll; the rest is read at the next
_WATCHED = ("step_end", "phase_begin", "checkpoint")


@dataclass(frozen=True)
class Progress:
    """One marker line the watchdog cares about.

    Attributes:
        event: ``step_end``, ``phase_begin`` or ``checkpoint``.
        step: Its step.
        wall_s: When it was written.
        rank: Its rank.
        node: Its node.
        phase: A ``phase_begin``'s name.
    """

    event: str
    step: int | None
    wall_s: float
    rank: int
    node: str
    phase: str | None = None


class MarkerFollower:
    """Reads what was appended to the run's marker files since the last ``poll``.

    Only complete lines are read; a file's partial last line waits for the next poll.
    Memory is bounded by the number of files, not their length. With ``tail_bytes``
    a file is read from its first whole line within its last ``tail_bytes`` (what
    ``rtk stall-check`` needs of a long run), else from its start.
    """

    def __init__(self, run_dir: str | Path, tail_bytes: int | None = None) -> None:
        """Follow the marker files of the run in ``run_dir``, from their start or tail."""
        self.layout = RunDir(run_dir)
        self._offsets: dict[Path, int] = {}
        self._tail_bytes = tail_bytes
        self.rank_nodes: dict[int, str] = {}
        self.read_bytes = 0  # of whole lines, over every poll

    def poll(self) -> list[Progress]:
        """The watched events appended since the last call, in file order."""
        found: list[Progress] = []
        for path in self.layout.marker_files():
            known = self._offsets.get(path)
            try:
                size = path.stat().st_size
                offset = known if known is not None else self._start(size)
                mid_line = known is None and offset > 0
                if size <= offset:
                    continue
                with path.open("rb") as f:
                    f.seek(offset)
                    data = f.read(min(size - offset, READ_MAX_BYTES))
            except OSError:
                continue
            if mid_line:  # the line the tail begins inside is not read
                cut = data.find(b"\n") + 1
                offset, data = offset + cut, data[cut:]
            complete = data.rfind(b"\n") + 1
            self._offsets[path] = offset + complete
            self.read_bytes += complete
            for line in data[:complete].splitlines():
                progress = self._read(line)
                if progress is not None:
                    found.append(progress)
        return found

    def _start(self, size: int) -> int:
        """Where a file of ``size`` bytes is first read: its start, or before its tail.

        The byte before the tail is read too: a newline there begins the tail's line.
        """
        if self._tail_bytes is None or size <= self._tail_bytes:
            return 0
        return size - self._tail_bytes - 1

    def _read(self, line: bytes) -> Progress | None:
        if not any(event.encode() in line for event in _WATCHED):
            return None
        try:
            data = json.loads(line)
            event, rank, node = data["event"], int(data["rank"]), str(data["node"])
            wall_s = float(data["wall_s"])
        except (ValueError, KeyError, TypeError):
            return None
        if event not in _WATCHED:
            return None
        self.rank_nodes.setdefault(rank, node)
        step = data.get("step")
        # A checkpoint marker stands for a long phase of its own.
        phase = {"phase_begin": data.get("name"), "checkpoint": event}.get(event)
        return Progress(
            event,
            step if isinstance(step, int) else None,
            wall_s,
            rank,
            node,
            phase if isinstance(phase, str) else None,
        )
