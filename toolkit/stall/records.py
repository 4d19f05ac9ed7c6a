"""A stalled run's evidence and diagnosis: the records of ``stall.json`` (and each node's answer).

When the watchdog (``toolkit.stall``) sees no rank finish a step for longer than its
timeout, every node reports on its ranks (``NodeEvidence``: one ``RankEvidence`` per
rank found there, or why the node did not answer), and the diagnosis names suspects
(``Suspect``). ``StallRecord`` is what the run directory keeps of one stall: the
diagnosis and every rank's evidence, stack included. One stall is one JSON object;
``stall.json`` holds a list of them, the newest last.

Stacks are kept innermost frame first, as py-spy and faulthandler print them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import RunDirError
from toolkit.fields import Fields
from toolkit.json_types import JsonObject
from toolkit.rundir.record_base import Record, check_version, record_fields
from toolkit.stall.flight.collectives import CollectiveStall, RankCollectives
from toolkit.stall.flight.ras import RasView

SCHEMA_VERSION = 1
STALL_FILE = "stall.json"  # RunDir.stall

# What a rank's process was doing, from /proc/PID/stat's state letter (or why unknown).
RUNNING, SLEEPING, DISK_WAIT, STOPPED, ZOMBIE, GONE, UNKNOWN = (
    "running",
    "sleeping",
    "disk-wait",
    "stopped",
    "zombie",
    "gone",
    "unknown",
)
PROCESS_STATES = (RUNNING, SLEEPING, DISK_WAIT, STOPPED, ZOMBIE, GONE, UNKNOWN)


# How a node's evidence begins when Ray declared the node dead (``stall.collect``).
RAY_LOST = "Ray lost the node"


@dataclass(frozen=True)
class Frame:
    """One frame of a Python stack.

    Attributes:
        function: The function's name (``<module>`` at a script's top level).
        file: The source file, as the interpreter knows it.
        line: The line being run (0 when unknown).
    """

    function: str
    file: str
    line: int

    @property
    def where(self) -> str:
        """``train.py:88``: the file's name and the line."""
        return f"{os.path.basename(self.file) or self.file}:{self.line}"

    def to_json(self) -> JsonObject:
        """A JSON object."""
        return {"function": self.function, "file": self.file, "line": self.line}

    @classmethod
    def from_fields(cls, f: Fields) -> Frame:
        """The inverse of ``to_json``."""
        return cls(f.text("function"), f.text("file"), f.integer("line"))


@dataclass(frozen=True)
class RankEvidence(Record):
    """What one rank was doing when the run stalled, seen on its node.

    Attributes:
        rank: The global rank.
        node: The node it runs on (its markers' ``node``).
        pid: Its process id (None: not known).
        local_rank: Its rank on the node.
        gpu: Its GPU (UUID or index), when it has one.
        state: One of ``PROCESS_STATES``.
        frames: Its main thread's stack, innermost first (empty: none could be read).
        stack_source: ``py-spy``, ``faulthandler`` or ``none``.
        stack_error: Why no stack was read, when none was.
        last_event: Its last marker's event (``step_end``, ``phase_begin``, ...).
        last_step: Its last marker's step.
        last_phase: The phase it was in (begun, not ended), if any.
        last_wall_s: When its last marker was written (time.time()).
        gpu_util_pct: Its GPU's utilisation at the stall, from the telemetry.
        power_w: Its GPU's power at the stall, from the telemetry.
        collectives: Its Flight Recorder's recent collectives, when it answered.
    """

    rank: int
    node: str
    pid: int | None = None
    local_rank: int | None = None
    gpu: str | None = None
    state: str = UNKNOWN
    frames: tuple[Frame, ...] = ()
    stack_source: str = "none"
    stack_error: str | None = None
    last_event: str | None = None
    last_step: int | None = None
    last_phase: str | None = None
    last_wall_s: float | None = None
    gpu_util_pct: float | None = None
    power_w: float | None = None
    collectives: RankCollectives | None = None

    def to_json(self) -> JsonObject:
        """The record as written."""
        return {
            "rank": self.rank,
            "node": self.node,
            "pid": self.pid,
            "local_rank": self.local_rank,
            "gpu": self.gpu,
            "state": self.state,
            "frames": [frame.to_json() for frame in self.frames],
            "stack_source": self.stack_source,
            "stack_error": self.stack_error,
            "last_event": self.last_event,
            "last_step": self.last_step,
            "last_phase": self.last_phase,
            "last_wall_s": self.last_wall_s,
            "gpu_util_pct": self.gpu_util_pct,
            "power_w": self.power_w,
            "collectives": self.collectives.to_json() if self.collectives else None,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "rank evidence") -> RankEvidence:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        return cls.from_fields(f)

    @classmethod
    def from_fields(cls, f: Fields) -> RankEvidence:
        """From a record's fields (see ``from_json``)."""
        state = f.text("state")
        if state not in PROCESS_STATES:
            raise f.fail("state", f"one of {', '.join(PROCESS_STATES)}")
        return cls(
            rank=f.integer("rank"),
            node=f.text("node"),
            pid=f.integer_or_none("pid"),
            local_rank=f.integer_or_none("local_rank"),
            gpu=f.text_or_none("gpu"),
            state=state,
            frames=tuple(Frame.from_fields(frame) for frame in f.objects("frames")),
            stack_source=f.text("stack_source"),
            stack_error=f.text_or_none("stack_error"),
            last_event=f.text_or_none("last_event"),
            last_step=f.integer_or_none("last_step"),
            last_phase=f.text_or_none("last_phase"),
            last_wall_s=f.number_or_none("last_wall_s"),
            gpu_util_pct=f.number_or_none("gpu_util_pct"),
            power_w=f.number_or_none("power_w"),
            collectives=RankCollectives.from_fields(held)
            if (held := f.nested_or_none("collectives"))
            else None,
        )


@dataclass(frozen=True)
class NodeEvidence(Record):
    """One node's answer: its ranks' evidence, or why it gave none.

    Attributes:
        node: The node.
        ranks: Evidence of each rank found there (by its marker files).
        error: Why the node gave no answer (did not answer in time, Ray lost it), or
            None when it answered.
        elapsed_s: How long the node took to answer (or was waited for).
        ras: NCCL RAS's view of the job, where the node was asked for it and has it.
    """

    node: str
    ranks: tuple[RankEvidence, ...] = ()
    error: str | None = None
    elapsed_s: float = 0.0
    ras: RasView | None = None

    @property
    def answered(self) -> bool:
        """True when the node gave its evidence."""
        return self.error is None

    def to_json(self) -> JsonObject:
        """The record as written."""
        return {
            "node": self.node,
            "ranks": [rank.to_json() for rank in self.ranks],
            "error": self.error,
            "elapsed_s": self.elapsed_s,
            "ras": self.ras.to_json() if self.ras else None,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "node evidence") -> NodeEvidence:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        return cls(
            node=f.text("node"),
            ranks=tuple(RankEvidence.from_fields(rank) for rank in f.objects("ranks")),
            error=f.text_or_none("error"),
            elapsed_s=f.number("elapsed_s"),
            ras=RasView.from_fields(held) if (held := f.nested_or_none("ras")) else None,
        )


@dataclass(frozen=True)
class Suspect(Record):
    """A rank, or a node, the diagnosis blames.

    Attributes:
        node: The node.
        reason: Why, in words (``stopped (SIGSTOP?)``, ``in next(dataloader)``,
            ``node did not answer``).
        rank: The rank (None: the node as a whole, when it did not answer).
        frame: Where the rank was (its innermost frame of interest), if known.
    """

    node: str
    reason: str
    rank: int | None = None
    frame: Frame | None = None

    def to_json(self) -> JsonObject:
        """The record as written."""
        return {
            "rank": self.rank,
            "node": self.node,
            "reason": self.reason,
            "frame": self.frame.to_json() if self.frame is not None else None,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "suspect") -> Suspect:
        """The inverse of ``to_json``."""
        return cls.from_fields(record_fields(data, where))

    @classmethod
    def from_fields(cls, f: Fields) -> Suspect:
        """From a record's fields (see ``from_json``)."""
        frame = f.nested_or_none("frame")
        return cls(
            node=f.text("node"),
            reason=f.text("reason"),
            rank=f.integer_or_none("rank"),
            frame=Frame.from_fields(frame) if frame is not None else None,
        )


@dataclass(frozen=True)
class StallRecord(Record):
    """One stall as the run directory keeps it.

    Attributes:
        detected_wall_s: When the watchdog declared it (time.time()).
        step: The last step any rank finished (None: none yet).
        stalled_s: How long no rank had finished a step when it was declared.
        timeout_s: The stall timeout in force.
        summary: The diagnosis in one line.
        groups: Where the ranks were: a phrase (``wait in allreduce``) -> how many.
        suspects: Whom the diagnosis blames, most likely first.
        nodes: Every node's evidence, stacks included.
        collect_s: How long collecting the evidence took.
        action: What the policy did (``report``, ``abort``, ``restart-excluding``).
        excluded: The nodes ``restart-excluding`` took out of the cluster.
        collectives: Per process group some rank is stuck in, where and who keeps it
            there, from the ranks' Flight Recorders (empty: none answered, or none stuck).
    """

    detected_wall_s: float
    step: int | None
    stalled_s: float
    timeout_s: float
    summary: str
    groups: dict[str, int] = field(default_factory=dict)
    suspects: tuple[Suspect, ...] = ()
    nodes: tuple[NodeEvidence, ...] = ()
    collect_s: float = 0.0
    action: str = "report"
    excluded: tuple[str, ...] = ()
    collectives: tuple[CollectiveStall, ...] = ()

    def to_json(self) -> JsonObject:
        """The record as written."""
        return {
            "v": SCHEMA_VERSION,
            "detected_wall_s": self.detected_wall_s,
            "step": self.step,
            "stalled_s": self.stalled_s,
            "timeout_s": self.timeout_s,
            "summary": self.summary,
            "groups": dict(self.groups),
            "suspects": [suspect.to_json() for suspect in self.suspects],
            "nodes": [node.to_json() for node in self.nodes],
            "collect_s": self.collect_s,
            "action": self.action,
            "excluded": list(self.excluded),
            "collectives": [stall.to_json() for stall in self.collectives],
        }

    @classmethod
    def from_json(cls, data: object, where: str = STALL_FILE) -> StallRecord:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        check_version(f, SCHEMA_VERSION)
        groups = f.obj_or_none("groups") or {}
        return cls(
            detected_wall_s=f.number("detected_wall_s"),
            step=f.integer_or_none("step"),
            stalled_s=f.number("stalled_s"),
            timeout_s=f.number("timeout_s"),
            summary=f.text("summary"),
            groups={str(k): int(v) for k, v in groups.items() if isinstance(v, int)},
            suspects=tuple(Suspect.from_fields(s) for s in f.objects("suspects")),
            nodes=tuple(
                NodeEvidence.from_json(n.data, f"{where}: nodes") for n in f.objects("nodes")
            ),
            collect_s=f.number("collect_s"),
            action=f.text("action"),
            excluded=f.texts("excluded"),
            collectives=tuple(CollectiveStall.from_fields(c) for c in f.objects("collectives")),
        )


def read_stalls(path: str | Path) -> list[StallRecord]:
    """The stalls kept in ``path`` (``stall.json``), oldest first; none when it is absent.

    Raises:
        RunDirError: The file is not a JSON list of stall records.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        raise RunDirError(f"{path}: not readable as JSON: {e}") from e
    if not isinstance(data, list):
        raise RunDirError(f"{path}: expected a list of stalls, got {type(data).__name__}")
    return [StallRecord.from_json(item, f"{path}: stall {i}") for i, item in enumerate(data)]


def append_stall(path: str | Path, stall: StallRecord) -> None:
    """Add ``stall`` to ``path`` (``stall.json``), written whole and renamed into place."""
    path = Path(path)
    stalls = [*read_stalls(path), stall]
    partial = path.with_name(path.name + ".part")
    partial.write_text(json.dumps([s.to_json() for s in stalls], indent=1) + "\n", encoding="utf-8")
    partial.replace(path)
