"""``rtk stall-check``'s job driver: a run's stall evidence on demand, whatever its timeout.

``python -m toolkit.stall.check_job OPTIONS_JSON`` (``CheckOptions``) runs as a Ray
job on the head, as the drivers that run the watchdog do. It reads the tails of the
run's marker files the head sees (``MarkerFollower``: the head's own ranks', or every
rank's when the run directory is shared) for the last step any rank finished and
when, asks every node at once for its ranks' evidence (``collect``), diagnoses it,
adds the record to ``stall.json`` with the action ``check`` and prints one screen:
each line after ``CHECK_PREFIX``, and with ``json`` the record on one line after
``CHECK_RECORD_PREFIX``.

No timeout declared this stall: its ``stalled_s`` is the time since a rank first
finished the last step (since the run's first marker when no step was finished),
and its ``timeout_s`` is 0, "asked by hand", which tells a check in ``stall.json``
from the watchdog's stalls as its ``action`` does. The recent steps' median time is
printed beside it, so a run that is slow is told from one that is stuck.

Exits 0 when it collected, whatever it found; 1 when the run directory is not on the
head or holds no marker there: one line, which begins with ``CHECK_REFUSED``.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import ray

from toolkit.errors import RunDirError
from toolkit.rundir import RunDir
from toolkit.rundir.markers import MarkerFollower, Progress
from toolkit.stall.detector import Stall, StallDetector
from toolkit.stall.diagnosis import diagnose
from toolkit.stall.records import NodeEvidence, append_stall
from toolkit.stall.settings import (
    CHECK,
    CHECK_PREFIX,
    CHECK_RECORD_PREFIX,
    CHECK_REFUSED,
    CheckOptions,
)
from toolkit.stall.watchdog import Collector, collect_all

# Of each marker file, the tail read for the last steps (a long run's file is hundreds
# of MB, and a shared run directory holds every rank's): some dozens of steps.
TAIL_BYTES = 64 * 1024
# When no tail holds a finished step, the files are read whole, this many polls at
# most (MarkerFollower reads 4 MiB of a file per poll).
WHOLE_READ_POLLS = 1024
FIRST_LINE_BYTES = 16 * 1024
# A check's timeout: none was crossed, it was asked by hand.
CHECK_TIMEOUT_S = 0.0
EXIT_NOTHING_TO_CHECK = 1

Say = Callable[[str], None]


def say(line: str) -> None:
    """A line for the user, in the job's log."""
    print(f"{CHECK_PREFIX}{line}", flush=True)


def _out(line: str) -> None:
    print(line, flush=True)


@dataclass(frozen=True)
class RunProgress:
    """What the marker files the head sees say of the run's progress.

    Attributes:
        step: The last step any rank finished (None: none in what was read).
        step_end_s: When a rank first finished it (time.time()).
        started_s: When the first marker of the run was written (read only when no
            step was finished).
        step_s: The median time of the recent steps (None: fewer than two steps).
        rank_nodes: Each rank's node, as its markers say.
    """

    step: int | None
    step_end_s: float | None
    started_s: float | None = None
    step_s: float | None = None
    rank_nodes: Mapping[int, str] = field(default_factory=dict)

    def since_s(self) -> float | None:
        """Since when no step was finished: the last step's end, else the run's start."""
        return self.step_end_s if self.step is not None else self.started_s

    def stall(self, now_s: float) -> Stall:
        """The stall as of ``now_s``: no step finished since ``since_s``."""
        since = self.since_s()
        stalled_s = max(0.0, now_s - since) if since is not None else 0.0
        return Stall(step=self.step, stalled_s=stalled_s, timeout_s=CHECK_TIMEOUT_S)

    def line(self, now_s: float) -> str:
        """The progress in words: ``step 120 finished 95 s ago; recent steps took 1.2 s``."""
        ago = self.stall(now_s).stalled_s
        if self.step is None:
            if self.started_s is None:
                return "no step finished yet"
            return f"no step finished yet; the first marker was written {seconds(ago)} ago"
        text = f"step {self.step} finished {seconds(ago)} ago"
        if self.step_s is not None:
            text += f"; recent steps took {seconds(self.step_s)} (median)"
        return text


def progress_of(
    events: Iterable[Progress],
    started_s: float | None = None,
    rank_nodes: Mapping[int, str] | None = None,
) -> RunProgress:
    """The last step finished, when, and the recent steps' median, from marker events.

    Events from every rank, in any order: they are taken in the order they were
    written (their ``wall_s``), as the watchdog's detector takes them.
    """
    ends = sorted(
        (e.wall_s, e.step) for e in events if e.event == "step_end" and e.step is not None
    )
    detector = StallDetector(ends[0][0] if ends else 0.0)
    first_end: dict[int, float] = {}
    for wall_s, step in ends:
        detector.step_done(step, wall_s)
        first_end.setdefault(step, wall_s)
    last = detector.step
    return RunProgress(
        last,
        first_end[last] if last is not None else None,
        started_s,
        detector.expected_step_s,
        dict(rank_nodes or {}),
    )


def read_progress(run_dir: str, tail_bytes: int = TAIL_BYTES) -> RunProgress | None:
    """The run's progress from the marker files seen here; None when there are none.

    Each file's tail is read; when no tail holds a finished step and some file is
    longer than its tail, the files are read whole (a rank's last step may lie
    further back). The run's start is read (each file's first line) only when no step
    was finished.
    """
    follower = MarkerFollower(run_dir, tail_bytes)
    files = follower.layout.marker_files()
    if not files:
        return None
    events = follower.poll()
    if not any(e.event == "step_end" for e in events) and any(_size(p) > tail_bytes for p in files):
        follower = MarkerFollower(run_dir)
        events = read_whole(follower)
    progress = progress_of(events, None, follower.rank_nodes)
    if progress.step is not None:
        return progress
    started_s = first_wall_s(files)
    if started_s is None and not events:
        return None  # files without one whole marker
    return progress_of(events, started_s, follower.rank_nodes)


def read_whole(follower: MarkerFollower, polls: int = WHOLE_READ_POLLS) -> list[Progress]:
    """Every watched event ``follower`` reads, polling until it reads nothing new."""
    events: list[Progress] = []
    for _ in range(polls):
        before = follower.read_bytes
        events += follower.poll()
        if follower.read_bytes == before:
            break
    return events


def first_wall_s(files: Iterable[Path]) -> float | None:
    """When the earliest first marker of ``files`` was written (None: no file has one)."""
    found: list[float] = []
    for path in files:
        try:
            with path.open("rb") as f:
                line = f.read(FIRST_LINE_BYTES).split(b"\n", 1)[0]
            wall_s = json.loads(line)["wall_s"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(wall_s, int | float) and not isinstance(wall_s, bool):
            found.append(float(wall_s))
    return min(found) if found else None


def check(
    options: CheckOptions,
    say: Say,
    collector: Collector = collect_all,
    clock: Callable[[], float] = time.time,
    out: Say = _out,
) -> int:
    """Check the run of ``options``; the job's exit status (see the module's docstring).

    Args:
        options: The run directory, each node's time, whether to print the record.
        say: Prints a line for the user.
        collector: Gathers every node's evidence (tests pass their own).
        clock: The wall clock (markers carry wall times).
        out: Prints the record's line (``options.as_json``).
    """
    layout = RunDir(options.run_dir)
    where = f"on the head ({socket.gethostname()})"
    if not layout.root.is_dir():
        say(
            f"{CHECK_REFUSED}{options.run_dir}: no such directory {where}; give the run "
            "directory as the nodes see it, or its run id"
        )
        return EXIT_NOTHING_TO_CHECK
    progress = read_progress(options.run_dir)
    if progress is None:
        say(
            f"{CHECK_REFUSED}{options.run_dir}: no rank's markers in {layout.markers_dir} "
            f"{where}: has the run begun, and does it write rtk's markers?"
        )
        return EXIT_NOTHING_TO_CHECK
    now_s = clock()
    say(
        f"{progress.line(now_s)}; asking every node for its ranks' stacks (each within "
        f"{options.per_node_timeout_s:g} s)"
    )
    began = time.monotonic()
    nodes = collector(options.run_dir, options.per_node_timeout_s)
    if not nodes:
        say("no node of this Ray cluster is one rtk brought up (rtk_host resources): no evidence")
    # Where the launch put each rank, as far as the head's markers say: a rank whose node
    # gave no trace of it is then named (unless no node was asked at all).
    expected = dict(progress.rank_nodes) if nodes else None
    diagnosis = diagnose(nodes, progress.stall(now_s), expected or None)
    record = diagnosis.to_record(nodes, clock(), time.monotonic() - began, CHECK)
    for line in diagnosis.lines():
        say(line)
    try:
        append_stall(layout.stall, record)
        say(f"every rank's stack: {layout.stall}")
    except (OSError, RunDirError) as e:
        say(f"could not add the check to {layout.stall}: {e}")
    if options.as_json:
        out(CHECK_RECORD_PREFIX + json.dumps(record.to_json()))
    return 0


def seconds(value_s: float) -> str:
    """``95 s``, ``1.2 s``, ``0.042 s``: two significant digits below 10 s."""
    return f"{value_s:.0f} s" if value_s >= 10 else f"{value_s:.2g} s"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def collect_connected(run_dir: str, per_node_timeout_s: float) -> list[NodeEvidence]:
    """``collect_all``, connected first to the head's Ray unless this process is."""
    if not ray.is_initialized():
        ray.init(address="auto", logging_level=logging.ERROR, log_to_driver=False)
    return collect_all(run_dir, per_node_timeout_s)


def main(argv: list[str]) -> int:
    """Check the run of ``argv[0]``, the options as JSON; the exit status."""
    options = CheckOptions.from_json(json.loads(argv[0]))
    return check(options, say, collect_connected)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
