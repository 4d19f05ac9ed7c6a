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
from pathlib import Path
from typing import IO, Any

SCHEMA_VERSION = 1


def marker_path(run_dir: str | Path, rank: int) -> Path:
    """Where rank ``rank`` writes its markers."""
    return Path(run_dir) / "markers" / f"rank-{rank:05d}.jsonl"


class MarkerWriter:
    """Appends marker records for one rank."""

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
        self._who = {
            "node": os.environ.get("RTK_NODE") or socket.gethostname(),
            "hostname": socket.gethostname(),
            "rank": rank,
            "local_rank": local_rank,
            "world_size": world_size,
            "gpu_uuid": gpu_uuid,
            "pid": os.getpid(),
        }

    def write(self, event: str, step: int | None = None, **fields: Any) -> dict[str, Any]:
        """Record ``event`` now, with both clocks; returns the record."""
        record: dict[str, Any] = {
            "v": SCHEMA_VERSION,
            "event": event,
            "step": step,
            "wall_s": time.time(),
            "mono_s": time.monotonic(),
            **self._who,
            **fields,
        }
        self._file.write(json.dumps(record) + "\n")
        return record

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def read_markers(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every rank's records, in file order per rank; a torn last line is skipped."""
    records: list[dict[str, Any]] = []
    for path in sorted((Path(run_dir) / "markers").glob("rank-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records
