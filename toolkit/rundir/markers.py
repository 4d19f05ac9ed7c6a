"""The trainer's marker stream: when each step began and ended, when each barrier let go.

One JSON object per line, one file per rank (``markers/rank-00000.jsonl``), flushed
line by line so a crash loses nothing written. Every record carries both clocks:
``wall_s`` (time.time, comparable across nodes after clock-offset correction) and
``mono_s`` (time.monotonic, comparable with the same node's telemetry samples), and
who wrote it: node, hostname, rank, local rank, GPU UUID. The telemetry report lines
power traces up against these records.

Events: ``run_start``, ``step_begin``, ``step_end`` (with loss, tokens), ``barrier``
(``wait_s``: how long this rank waited), ``checkpoint``, ``run_end``.

Stack dumps on request. The stall watchdog reads a rank's stack with py-spy, which needs
ptrace permission over the rank (Yama's ``ptrace_scope`` 1, the usual default, refuses
it to a process that is not the rank's ancestor, as a Ray task is not). Where it has
none it asks the rank itself: it sends ``STACK_SIGNAL`` and reads what faulthandler
appends to ``RunDir.stack_dump(rank)``. ``MarkerWriter`` (through which every process
that writes markers goes: rtk's trainer, ``toolkit.markers``) calls
``register_stack_dumps`` once per process, and it writes a registration line there first::

    # rtk stack dumps: pid=1234 thread=139811505765248 signal=12

naming the process and the thread that opened the marker stream (``threading.get_ident``,
the id both faulthandler and py-spy print): under Ray Train the training loop runs in
a thread of its own, not the main one. The reader sends the signal only to a pid with
such a line, whose kernel state (``/proc/PID/status`` SigCgt) says it catches the
signal: a process that does not would be killed by it.

SIGUSR2: SIGUSR1 is taken (Lightning's SLURM requeue, SLURM ``--signal`` setups, Ray
Tune). No rank-side code of Ray, torch, DeepSpeed, Accelerate, Lightning or Transformers
handles SIGUSR2 (torchrun forwards USR1/USR2 to its workers only when told to; Ray's
dashboard agent dumps its own stacks on it, in that process only); NCCL does only when
``NCCL_PROXY_DUMP_SIGNAL`` names it (off by default), and then both run, or NCCL's alone.

The previous handler is chained to only when there is one (the signal is caught):
chaining to the default action of SIGUSR2 would end the process. A forked child (a
DataLoader worker) drops the registration, so a stray signal finds in it what it
would without rtk, and nothing writes into its parent's file. A failure to register
is silent: markers never stop training.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from toolkit.json_types import JsonObject, JsonValue
from toolkit.rundir.layout import RunDir
from toolkit.rundir.record_base import Record, check_version, record_fields
from toolkit.wallclock import wall_s

SCHEMA_VERSION = 1
# Who wrote a record; every other key beside these and the clocks is the event's own.
_WHO = ("node", "hostname", "rank", "local_rank", "world_size", "gpu_uuid", "pid")
_BASE = ("v", "event", "step", "wall_s", "mono_s", *_WHO)


def marker_path(run_dir: str | Path, rank: int) -> Path:
    """Where rank ``rank`` writes its markers."""
    return RunDir(run_dir).marker(rank)


@dataclass(frozen=True)
class Marker(Record):
    """One marker record, as one line of a rank's file.

    Attributes:
        event: ``run_start``, ``step_begin``, ``step_end``, ``barrier``, ...
        step: The step it belongs to (None for events without one).
        wall_s: time.time() when written.
        mono_s: time.monotonic() when written (the node's sample clock).
        node: The inventory name of the node (``RTK_NODE``), else its hostname.
        hostname: The node's hostname.
        rank: The writer's global rank.
        local_rank: Its rank on the node.
        world_size: How many ranks.
        gpu_uuid: Its GPU, when it has one.
        pid: Its process id.
        fields: The event's own fields (``loss``, ``tokens``, ``wait_s``, ...), written
            as they are: open-ended, so kept as JSON values.
    """

    event: str
    step: int | None
    wall_s: float
    mono_s: float
    node: str
    hostname: str
    rank: int
    local_rank: int
    world_size: int
    gpu_uuid: str | None
    pid: int
    fields: Mapping[str, JsonValue] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        """The record as written: one flat object."""
        return {
            "v": SCHEMA_VERSION,
            "event": self.event,
            "step": self.step,
            "wall_s": self.wall_s,
            "mono_s": self.mono_s,
            **{name: getattr(self, name) for name in _WHO},
            **self.fields,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "marker") -> Marker:
        """The inverse of ``to_json``.

        Raises:
            toolkit.errors.RunDirError: A field is missing or of the wrong type.
        """
        f = record_fields(data, where)
        check_version(f, SCHEMA_VERSION)
        return cls(
            event=f.text("event"),
            step=f.integer_or_none("step"),
            wall_s=f.number("wall_s"),
            mono_s=f.number("mono_s"),
            node=f.text("node"),
            hostname=f.text("hostname"),
            rank=f.integer("rank"),
            local_rank=f.integer("local_rank"),
            world_size=f.integer("world_size"),
            gpu_uuid=f.text_or_none("gpu_uuid"),
            pid=f.integer("pid"),
            fields={k: v for k, v in f.data.items() if k not in _BASE},
        )


class MarkerWriter:
    """Appends marker records for one rank.

    The first writer of a process also registers its stack dumps on request
    (faulthandler into ``RunDir.stack_dump(rank)``, see the module), for
    the stall watchdog; that never fails the writer.
    """

    def __init__(
        self,
        run_dir: str | Path,
        rank: int,
        local_rank: int,
        world_size: int,
        gpu_uuid: str | None = None,
    ) -> None:
        self.path = marker_path(run_dir, rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = self.path.open("a", encoding="utf-8", buffering=1)
        self._node = os.environ.get("RTK_NODE") or socket.gethostname()
        self._hostname = socket.gethostname()
        self._rank, self._local_rank, self._world_size = rank, local_rank, world_size
        self._gpu_uuid = gpu_uuid
        self._pid = os.getpid()
        register_stack_dumps(RunDir(run_dir).stack_dump(rank))

    def write(self, event: str, step: int | None = None, **fields: JsonValue) -> Marker:
        """Record ``event`` now, with both clocks; returns the record written."""
        marker = Marker(
            event,
            step,
            wall_s(),
            time.monotonic(),
            self._node,
            self._hostname,
            self._rank,
            self._local_rank,
            self._world_size,
            self._gpu_uuid,
            self._pid,
            fields,
        )
        self._file.write(json.dumps(marker.to_json()) + "\n")
        return marker

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def read_markers(run_dir: str | Path) -> list[Marker]:
    """Every rank's records, in file order per rank; a torn line is skipped.

    Raises:
        toolkit.errors.RunDirError: A whole line is not a marker (naming the file and the line).
    """
    return [marker for path in RunDir(run_dir).marker_files() for marker in _file_markers(path)]


def _file_markers(path: Path) -> Iterator[Marker]:
    text = path.read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn line: its writer was killed mid-line
        yield Marker.from_json(data, f"{path}:{number}")


# --- Stack dumps on request (see the module) ----------------------------------------

STACK_SIGNAL = signal.SIGUSR2
_REGISTRATION = "# rtk stack dumps: pid={pid} thread={thread} signal={signal}\n"
_REGISTRATION_RE = re.compile(r"^# rtk stack dumps: pid=(\d+) thread=(\d+)", re.MULTILINE)

_registered_pid: int | None = None  # the process that registered (a fork child is not it)
# Kept open for the process's life: faulthandler writes to its descriptor.
_stack_file: IO[str] | None = None


@dataclass(frozen=True)
class Registration:
    """A process's registration line in its rank's stack dump file.

    Attributes:
        pid: The process.
        thread_id: The thread that opened its marker stream (``threading.get_ident``).
    """

    pid: int
    thread_id: int


def register_stack_dumps(path: Path) -> bool:
    """Dump every thread's stack to ``path`` on ``STACK_SIGNAL``, once per process.

    Returns:
        True when registered now; False when this process already is, or it failed.
    """
    global _registered_pid, _stack_file
    if _registered_pid == os.getpid():
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        file = path.open("a", encoding="utf-8")
        chain = catches_signal("self", STACK_SIGNAL)
        faulthandler.register(STACK_SIGNAL, file=file, all_threads=True, chain=chain is not False)
        file.write(registration_line(os.getpid(), threading.get_ident()))
        file.flush()
    except Exception:  # noqa: BLE001 - markers never stop training
        return False
    _registered_pid, _stack_file = os.getpid(), file
    return True


def registration_line(pid: int, thread_id: int) -> str:
    """The line a registration writes into the dump file."""
    return _REGISTRATION.format(pid=pid, thread=thread_id, signal=int(STACK_SIGNAL))


def registrations(text: str) -> list[Registration]:
    """The registration lines in a dump file's text, in file order."""
    return [Registration(int(m[1]), int(m[2])) for m in _REGISTRATION_RE.finditer(text)]


def registration(path: Path, pid: int) -> Registration | None:
    """The last registration of ``pid`` in the dump file ``path`` (None: none, or no file)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = [r for r in registrations(text) if r.pid == pid]
    return found[-1] if found else None


def catches_signal(pid: int | str, signum: int) -> bool | None:
    """Whether process ``pid`` (or ``"self"``) has a handler for ``signum``, from its kernel state.

    Reads ``SigCgt`` of ``/proc/PID/status``; where that cannot be read, this process's
    own Python view (``signal.getsignal``: a Python handler, or one set outside Python).

    Returns:
        True or False; None when it cannot be known (another process, no /proc).
    """
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError):
        pass
    if pid != "self":
        return None
    return signal.getsignal(signum) not in (signal.SIG_DFL, signal.SIG_IGN)


def _forget_stack_dumps_in_child() -> None:
    """In a forked child: restore the handler rtk's registration replaced."""
    global _registered_pid, _stack_file
    if _registered_pid is None or _registered_pid == os.getpid():
        return
    with contextlib.suppress(Exception):  # a child that keeps it writes a dump, no more
        faulthandler.unregister(STACK_SIGNAL)
    _registered_pid, _stack_file = None, None


os.register_at_fork(after_in_child=_forget_stack_dumps_in_child)


# -- following the files as they grow ------------------------------------------------
# What a job driver watches (the stall watchdog, rtk stall-check, the power policy):
# the lines appended since the last poll, complete lines only, and of them the ones a
# watcher acts on (a finished step, a phase's start, a checkpoint) as ``Progress``.
# Its cost is a ``stat`` per file and a read of what was appended, at most
# ``READ_MAX_BYTES`` of a file per poll.

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
