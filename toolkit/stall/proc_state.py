"""What a rank's process is doing, from ``/proc/PID/stat``: its state, and whether it is still it.

The state letter is the thread group leader's (the process's main thread). A pid
whose ``/proc`` entry is gone is ``gone``; so is one that started after the rank
wrote its last marker: the rank has ended and another program got its pid. Start
times are compared on the node's monotonic clock (markers keep ``mono_s``, on the
rank's node), which no ``RTK_CLOCK_SKEW_S`` shifts.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from toolkit.stall.records import (
    DISK_WAIT,
    GONE,
    RUNNING,
    SLEEPING,
    STOPPED,
    UNKNOWN,
    ZOMBIE,
)

# /proc/PID/stat's state letter (proc(5)) -> one of stall.records.PROCESS_STATES.
STATE_OF_LETTER = {
    "R": RUNNING,
    "S": SLEEPING,
    "I": SLEEPING,  # idle (kernel threads)
    "D": DISK_WAIT,
    "T": STOPPED,  # by a signal (SIGSTOP, SIGTSTP)
    "t": STOPPED,  # by a tracer
    "Z": ZOMBIE,
    "X": GONE,
    "x": GONE,
}
# A process counts as started before a marker up to this much after it (the tick's
# rounding, the clocks' reading order).
START_SLACK_S = 1.0


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/PID/stat`` rtk reads.

    Attributes:
        pid: The process.
        command: Its command name (``comm``, at most 15 characters).
        state: Its state letter.
        start_ticks: When it started, in clock ticks after the boot.
    """

    pid: int
    command: str
    state: str
    start_ticks: int


def parse_stat(text: str) -> ProcStat:
    """Read ``/proc/PID/stat``'s text (the command name may hold spaces and parentheses).

    Raises:
        ValueError: It is not such a line.
    """
    head, paren, rest = text.rpartition(")")
    pid, open_paren, command = head.partition(" (")
    fields = rest.split()
    if not (paren and open_paren and len(fields) >= 20):
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}")
    return ProcStat(int(pid), command, fields[0], int(fields[19]))


def read_stat(pid: int) -> ProcStat | None:
    """``/proc/PID/stat`` now; None when the process is gone.

    Raises:
        OSError: It could not be read for another reason.
        ValueError: It could not be parsed.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            return parse_stat(stat.read())
    except (FileNotFoundError, ProcessLookupError):
        return None


def started_mono_s(stat: ProcStat) -> float:
    """When the process started, on this node's ``time.monotonic()`` clock.

    ``/proc`` counts from the boot including time suspended (CLOCK_BOOTTIME); the
    monotonic clock leaves that out, so it is taken off.
    """
    suspended_s = time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic()
    return stat.start_ticks / os.sysconf("SC_CLK_TCK") - max(suspended_s, 0.0)


def process_state(pid: int, marked_mono_s: float | None = None) -> str:
    """The state of process ``pid`` (one of ``stall.records.PROCESS_STATES``).

    Args:
        pid: The process.
        marked_mono_s: When it wrote its last marker (``time.monotonic()`` on this node):
            a process that started after that is another program with the pid (gone).
    """
    try:
        stat = read_stat(pid)
    except (OSError, ValueError):
        return UNKNOWN
    if stat is None or stat.pid != pid:
        return GONE
    if marked_mono_s is not None and started_mono_s(stat) > marked_mono_s + START_SLACK_S:
        return GONE
    return STATE_OF_LETTER.get(stat.state, UNKNOWN)
