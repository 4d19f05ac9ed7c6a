"""The trainer's markers, read one rank file at a time and reduced to what the report needs.

A thousand ranks writing for hours leave millions of marker records; the report never
holds them as dicts. Each rank's file is parsed (Arrow's JSON reader, or line by line
when a torn line defeats it), its restarts resolved, and only small aggregates kept:
the window's candidates, the reference rank's steps, every barrier's exit and every
rank's wait at it, tokens and restarts.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.json as pajson

from toolkit.telemetry.report.series import FloatArray

# The fields the report reads of a marker record.
_SCHEMA = pa.schema(
    [
        ("event", pa.string()),
        ("step", pa.int64()),
        ("wall_s", pa.float64()),
        ("rank", pa.int64()),
        ("node", pa.string()),
        ("hostname", pa.string()),
        ("gpu_uuid", pa.string()),
        ("tokens", pa.int64()),
        ("wait_s", pa.float64()),
    ]
)
_PARSE = pajson.ParseOptions(explicit_schema=_SCHEMA, unexpected_field_behavior="ignore")
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Row:
    """One marker record, as the report reads it (``t_s`` on the head's timeline)."""

    event: str
    step: int | None
    t_s: float
    rank: int
    node: str
    gpu_uuid: str | None
    tokens: int | None
    wait_s: float | None


@dataclass(frozen=True)
class StepSpan:
    """One optimizer step of the reference rank, on the head's timeline."""

    step: int
    begin_s: float
    end_s: float


@dataclass(frozen=True)
class Barrier:
    """One barrier's exit: the median over ranks, and how far the ranks' times spread.

    ``spread_s`` measures the alignment: every rank leaves a barrier at the same moment,
    so after clock correction their times should agree within the offsets' uncertainty.
    """

    step: int
    t_s: float
    spread_s: float
    ranks: int


@dataclass(frozen=True)
class Waits:
    """Every rank's wait at every barrier (latest attempt), as flat arrays.

    Attributes:
        step: The barrier's step.
        rank: The waiting rank.
        node: Index into ``nodes``.
        device: The rank's GPU UUID, or None (index into ``devices``, -1 for none).
        enter_s: When it reached the barrier (exit minus its wait).
        exit_s: When the barrier let it go.
        nodes: Node names.
        devices: GPU UUIDs.
    """

    step: IntArray
    rank: IntArray
    node: IntArray
    device: IntArray
    enter_s: FloatArray
    exit_s: FloatArray
    nodes: list[str]
    devices: list[str]

    @property
    def wait_s(self) -> FloatArray:
        """Each wait's length."""
        wait: FloatArray = self.exit_s - self.enter_s
        return wait

    def __len__(self) -> int:
        return int(self.step.size)


@dataclass
class MarkerSummary:
    """What the report keeps of every rank's markers.

    Attributes:
        start_s: Earliest run_start/step_begin of any rank (head timeline).
        end_s: Latest step_end/run_end of any rank.
        steps: The reference rank's completed steps, latest attempt.
        step_rank: The reference rank (0, or the lowest rank with markers).
        barriers: Barrier exits, in time order.
        ranks: How many ranks wrote markers.
        restarts: Resumed attempts (most on any rank).
        tokens: Tokens over every rank's step_end records, when they carry them.
        waits: Every rank's wait at every barrier.
        unknown_nodes: Nodes markers named that the manifest does not have.
    """

    start_s: float | None = None
    end_s: float | None = None
    steps: list[StepSpan] = field(default_factory=list)
    step_rank: int | None = None
    barriers: list[Barrier] = field(default_factory=list)
    ranks: int = 0
    restarts: int = 0
    tokens: int | None = None
    waits: Waits | None = None
    unknown_nodes: set[str] = field(default_factory=set)


def reduce_markers(
    files: list[Path], offsets_s: dict[str, float], hostnames: dict[str, str]
) -> MarkerSummary:
    """Read every rank file and keep only the aggregates.

    Args:
        files: The marker files, one per rank.
        offsets_s: Node -> its clock offset (subtracted from its times).
        hostnames: Hostname -> node name (markers may name their node by either).
    """
    out = MarkerSummary()
    exits: dict[int, list[float]] = defaultdict(list)
    waits: list[tuple[int, int, str, str | None, float, float]] = []
    tokens: int | None = None
    ranks: set[int] = set()
    for path in files:
        for rank, rows in _ranks(path, offsets_s, hostnames, out.unknown_nodes):
            ranks.add(rank)
            out.restarts = max(out.restarts, sum(r.event == "run_start" for r in rows) - 1)
            latest = _latest_attempt(rows)
            starts = [r.t_s for (e, _), r in latest.items() if e in ("run_start", "step_begin")]
            ends = [r.t_s for (e, _), r in latest.items() if e in ("step_end", "run_end")]
            if starts:
                out.start_s = min(starts) if out.start_s is None else min(out.start_s, *starts)
            if ends:
                out.end_s = max(ends) if out.end_s is None else max(out.end_s, *ends)
            for (event, _), row in latest.items():
                if event == "step_end" and row.tokens is not None:
                    tokens = (tokens or 0) + row.tokens
            for (event, step), row in latest.items():
                if event != "barrier" or step is None:
                    continue
                exits[step].append(row.t_s)
                if row.wait_s is not None and math.isfinite(row.wait_s) and row.wait_s >= 0:
                    waits.append(
                        (step, rank, row.node, row.gpu_uuid, row.t_s - row.wait_s, row.t_s)
                    )
            if out.step_rank is None or rank < out.step_rank:  # rank 0, else the lowest
                out.step_rank = rank
                out.steps = step_spans(latest)
    out.ranks = len(ranks)
    out.tokens = tokens
    out.barriers = sorted(
        (Barrier(s, float(np.median(ts)), max(ts) - min(ts), len(ts)) for s, ts in exits.items()),
        key=lambda b: b.t_s,
    )
    out.waits = _waits(waits)
    return out


def rank_markers(
    files: list[Path], offsets_s: dict[str, float], hostnames: dict[str, str]
) -> Iterator[tuple[int, dict[tuple[str, int | None], Row]]]:
    """Each rank's latest attempt, one rank file at a time: ``(event, step)`` -> record.

    For readers that need every rank's records rather than the aggregates (the trace
    export); the same parsing and restart handling as ``reduce_markers``.
    """
    for path in files:
        for rank, rows in _ranks(path, offsets_s, hostnames, set()):
            yield rank, _latest_attempt(rows)


def _ranks(
    path: Path, offsets_s: dict[str, float], hostnames: dict[str, str], unknown: set[str]
) -> Iterator[tuple[int, list[Row]]]:
    """A file's usable records grouped by rank, in file order."""
    by_rank: dict[int, list[Row]] = defaultdict(list)
    for record in _records(path):
        wall_s, rank = record.get("wall_s"), record.get("rank")
        if isinstance(wall_s, bool) or not isinstance(wall_s, int | float):
            continue
        if isinstance(rank, bool) or not isinstance(rank, int):
            continue
        who = str(record.get("node") or "")
        node = node_of(who, record.get("hostname"), offsets_s, hostnames)
        if node is None:
            unknown.add(who)
        step, tokens, wait_s = record.get("step"), record.get("tokens"), record.get("wait_s")
        gpu = record.get("gpu_uuid")
        by_rank[rank].append(
            Row(
                event=str(record.get("event")),
                step=step if isinstance(step, int) and not isinstance(step, bool) else None,
                t_s=float(wall_s) - offsets_s.get(node or "", 0.0),
                rank=rank,
                node=node or who,
                gpu_uuid=gpu if isinstance(gpu, str) else None,
                tokens=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
                wait_s=float(wait_s)
                if isinstance(wait_s, int | float) and not isinstance(wait_s, bool)
                else None,
            )
        )
    yield from by_rank.items()


def node_of(
    who: str, hostname: object, offsets_s: dict[str, float], hostnames: dict[str, str]
) -> str | None:
    """The manifest node a marker names by its ``node`` or ``hostname``; None if neither."""
    if who in offsets_s:
        return who
    return hostnames.get(who) or hostnames.get(str(hostname))


def read_rank_table(path: Path) -> pa.Table | None:
    """A rank file's records as columns (the fields the report reads), by Arrow's reader.

    None when the reader fails on the file (a torn line): ``rank_markers`` reads such a
    file line by line.
    """
    try:
        return pajson.read_json(path, parse_options=_PARSE)
    except (pa.ArrowInvalid, OSError, ValueError):
        return None


def _records(path: Path) -> list[dict[str, Any]]:
    """A rank file's records: Arrow's JSON reader, or line by line past a torn line."""
    table = read_rank_table(path)
    if table is not None:
        return list(table.to_pylist())
    records: list[dict[str, Any]] = []
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def _latest_attempt(rows: list[Row]) -> dict[tuple[str, int | None], Row]:
    """(event, step) -> the latest record, after dropping what a restart superseded.

    A ``run_start`` after the first resumes from a checkpoint at its ``step``: records
    of the failed attempt for later steps are superseded (those steps run again).
    The first attempt's ``run_start`` stays: the run's window begins there.
    """
    kept: list[Row] = []
    for row in rows:
        if row.event == "run_start" and kept:
            resumed_at = row.step or 0
            kept = [
                r
                for r in kept
                if r.event == "run_start" or (r.step if r.step is not None else -1) <= resumed_at
            ]
        kept.append(row)
    latest: dict[tuple[str, int | None], Row] = {}
    for row in kept:
        key = (row.event, row.step)
        if key[0] == "run_start" and key in latest:
            continue  # the window starts with the first attempt
        latest[key] = row
    return latest


def step_spans(latest: dict[tuple[str, int | None], Row]) -> list[StepSpan]:
    """A rank's completed steps (``step_begin`` and ``step_end``), by step number."""
    spans = []
    for (event, step), end in latest.items():
        begin = latest.get(("step_begin", step))
        if event == "step_end" and step is not None and begin is not None:
            spans.append(StepSpan(step, begin.t_s, end.t_s))
    return sorted(spans, key=lambda s: s.step)


def _waits(waits: list[tuple[int, int, str, str | None, float, float]]) -> Waits:
    nodes = sorted({w[2] for w in waits})
    devices = sorted({w[3] for w in waits if w[3] is not None})
    node_index = {n: i for i, n in enumerate(nodes)}
    device_index = {d: i for i, d in enumerate(devices)}
    return Waits(
        step=np.array([w[0] for w in waits], dtype=np.int64),
        rank=np.array([w[1] for w in waits], dtype=np.int64),
        node=np.array([node_index[w[2]] for w in waits], dtype=np.int64),
        device=np.array(
            [device_index[w[3]] if w[3] is not None else -1 for w in waits], dtype=np.int64
        ),
        enter_s=np.array([w[4] for w in waits], dtype=np.float64),
        exit_s=np.array([w[5] for w in waits], dtype=np.float64),
        nodes=nodes,
        devices=devices,
    )
