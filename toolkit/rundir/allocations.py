"""A run's SLURM allocations (``allocations.jsonl``) and how far its training got.

A batch job with ``--requeue`` may train one run over several allocations of the same
job: at each allocation's teardown the job script appends one ``AllocationRecord``
(who ran, from when to when, what ended it, how far training got, whether the job
requeued itself). ``training_progress`` reads how far a run got from the trainer's
own records, ``metrics.jsonl`` and ``train_config.json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import RunDirError
from toolkit.json_types import JsonObject
from toolkit.rundir.layout import RunDir
from toolkit.rundir.record_base import Record, record_fields
from toolkit.rundir.train import TrainConfigRecord, metrics_step


@dataclass(frozen=True)
class TrainingProgress:
    """How far a run's training got.

    Attributes:
        last_step: The last step in ``metrics.jsonl`` (0: none yet).
        max_steps: The step the run ends at (``train_config.json``); None when the
            trainer never started.
    """

    last_step: int
    max_steps: int | None

    @property
    def done(self) -> bool:
        """Whether the run trained its last step."""
        return self.max_steps is not None and self.last_step >= self.max_steps


def training_progress(run_dir: RunDir) -> TrainingProgress:
    """How far the run in ``run_dir`` got, from its metrics and its trainer options.

    A line cut short (a killed writer) or not a step's is skipped.

    Raises:
        RunDirError: ``train_config.json`` is there but unreadable or malformed.
    """
    last = 0
    if run_dir.metrics.exists():
        text = run_dir.metrics.read_text(encoding="utf-8", errors="replace")
        steps = (metrics_step(line) for line in text.splitlines())
        last = max((s for s in steps if s is not None), default=0)
    max_steps = None
    if run_dir.train_config.exists():
        options = TrainConfigRecord.read(run_dir.train_config).options
        value = options.get("max_steps")
        if not isinstance(value, int) or isinstance(value, bool):
            raise RunDirError(
                f"{run_dir.train_config}: max_steps: expected an integer, got {value!r}"
            )
        max_steps = value
    return TrainingProgress(last, max_steps)


@dataclass(frozen=True)
class AllocationRecord(Record):
    """One allocation of a batch job that trained the run (a line of ``allocations.jsonl``).

    Attributes:
        job_id: The SLURM job id (the same in every allocation of a requeued job).
        restart_count: ``SLURM_RESTART_COUNT``: 0 in the first allocation.
        nodes: The allocation's nodes (``SLURM_JOB_NODELIST``).
        started_wall_s: When the job script started in this allocation.
        ended_wall_s: When its teardown wrote this record.
        ended_by: What ended it: ``USR1`` (the time limit is near), ``TERM``, ``INT``,
            or ``end`` (the work ended by itself).
        last_step: The last trained step at the end (``metrics.jsonl``).
        max_steps: The step the run ends at; None when the trainer never started.
        requeued: Whether the job requeued itself for another allocation.
        reason: Why it did or did not, in words.
    """

    job_id: str
    restart_count: int
    nodes: str
    started_wall_s: float | None
    ended_wall_s: float
    ended_by: str
    last_step: int
    max_steps: int | None
    requeued: bool
    reason: str

    def to_json(self) -> JsonObject:
        """The record as written."""
        return {
            "job_id": self.job_id,
            "restart_count": self.restart_count,
            "nodes": self.nodes,
            "started_wall_s": self.started_wall_s,
            "ended_wall_s": self.ended_wall_s,
            "ended_by": self.ended_by,
            "last_step": self.last_step,
            "max_steps": self.max_steps,
            "requeued": self.requeued,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "allocations.jsonl") -> AllocationRecord:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        return cls(
            job_id=f.text("job_id"),
            restart_count=f.integer("restart_count"),
            nodes=f.text("nodes"),
            started_wall_s=f.number_or_none("started_wall_s"),
            ended_wall_s=f.number("ended_wall_s"),
            ended_by=f.text("ended_by"),
            last_step=f.integer("last_step"),
            max_steps=f.integer_or_none("max_steps"),
            requeued=f.flag("requeued"),
            reason=f.text("reason"),
        )

    def append_to(self, path: Path) -> None:
        """Append the record as one line (the file is created when missing)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(self.to_json()) + "\n")


def read_allocations(path: Path) -> Iterator[AllocationRecord | RunDirError]:
    """Every line of ``path`` as a record, or the error that line gave (none: no file)."""
    if not path.exists():
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{path}:{number}"
        try:
            yield AllocationRecord.from_json(json.loads(line), where)
        except json.JSONDecodeError as e:
            yield RunDirError(f"{where}: not JSON ({e})")
        except RunDirError as e:
            yield e
