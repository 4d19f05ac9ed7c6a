"""The trainer's marker stream: when each step began and ended, when each barrier let go.

One JSON object per line, one file per rank (``markers/rank-00000.jsonl``), flushed
line by line so a crash loses nothing written. Every record carries both clocks:
``wall_s`` (time.time, comparable across nodes after clock-offset correction) and
``mono_s`` (time.monotonic, comparable with the same node's telemetry samples), and
who wrote it: node, hostname, rank, local rank, GPU UUID. The telemetry report lines
power traces up against these records.

Events: ``run_start``, ``step_begin``, ``step_end`` (with loss, tokens), ``barrier``
(``wait_s``: how long this rank waited), ``checkpoint``, ``run_end``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from toolkit.json_types import JsonValue
from toolkit.rundir.layout import RunDir
from toolkit.rundir.record_base import Record, check_version, record_fields
from toolkit.rundir.stack_dumps import register_stack_dumps
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

    def to_json(self) -> dict[str, Any]:
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
    (``toolkit.rundir.stack_dumps``: faulthandler into ``RunDir.stack_dump(rank)``), for
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
