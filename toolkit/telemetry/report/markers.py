"""The trainer's markers, read one rank file at a time and reduced to what the report needs.

A thousand ranks writing for hours leave millions of marker records; the report never
holds them as Python objects. Each rank's file is parsed into columns (Arrow's JSON
reader, or line by line when a torn line defeats it), its restarts resolved with
array operations, and only small aggregates kept: the window's ends, the reference
rank's steps, every barrier's exit and every rank's wait at it, tokens and restarts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from toolkit.telemetry.report.series import FloatArray, value_codes

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


# Event codes; other events (checkpoint, ...) play no part in the report.
_EVENTS = ("run_start", "step_begin", "step_end", "barrier", "run_end")
RUN_START, STEP_BEGIN, STEP_END, BARRIER, RUN_END = range(len(_EVENTS))
_NO_STEP = -1  # a record without a step (as the restart rule compares it)


@dataclass
class _Columns:
    """One file's usable records as arrays, in file order."""

    event: IntArray
    step: IntArray  # _NO_STEP where the record has none
    has_step: npt.NDArray[np.bool_]
    wall_s: FloatArray
    rank: IntArray
    who: list[str]  # per distinct writer: its node (or host) name as written
    who_index: IntArray
    hostnames: list[str]
    gpu: list[str | None]  # per distinct GPU UUID
    gpu_index: IntArray
    tokens: IntArray
    has_tokens: npt.NDArray[np.bool_]
    wait_s: FloatArray  # NaN where the record has none


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
    barrier_steps: list[IntArray] = []
    barrier_t: list[FloatArray] = []
    waits: list[tuple[IntArray, IntArray, list[str], IntArray, FloatArray, FloatArray]] = []
    gpus: list[list[str | None]] = []
    ranks: set[int] = set()
    for path in files:
        columns = _read(path)
        if columns is None:
            continue
        node_of = _resolve(columns, offsets_s, hostnames, out.unknown_nodes)
        names = [name for name, _ in node_of]
        offset = np.array([o for _, o in node_of], dtype=np.float64)
        t_s = columns.wall_s - offset[columns.who_index]
        for rank in np.unique(columns.rank).tolist():
            mine = np.flatnonzero(columns.rank == rank)
            ranks.add(int(rank))
            event, step = columns.event[mine], columns.step[mine]
            out.restarts = max(out.restarts, int((event == RUN_START).sum()) - 1)
            latest = mine[_latest_attempt(event, step, columns.has_step[mine])]
            ev, st, t = columns.event[latest], columns.step[latest], t_s[latest]
            begins = t[(ev == RUN_START) | (ev == STEP_BEGIN)]
            ends = t[(ev == STEP_END) | (ev == RUN_END)]
            if begins.size:
                low = float(begins.min())
                out.start_s = low if out.start_s is None else min(out.start_s, low)
            if ends.size:
                high = float(ends.max())
                out.end_s = high if out.end_s is None else max(out.end_s, high)
            counted = (ev == STEP_END) & columns.has_tokens[latest]
            if counted.any():
                out.tokens = (out.tokens or 0) + int(columns.tokens[latest][counted].sum())
            at_barrier = (ev == BARRIER) & columns.has_step[latest]
            rows = latest[at_barrier]
            barrier_steps.append(st[at_barrier])
            barrier_t.append(t[at_barrier])
            wait_s = columns.wait_s[rows]
            ok = np.isfinite(wait_s) & (wait_s >= 0)
            rows, exit_s = rows[ok], t[at_barrier][ok]
            waits.append(
                (
                    columns.step[rows],
                    np.full(rows.size, rank, dtype=np.int64),
                    [names[i] for i in columns.who_index[rows].tolist()],
                    columns.gpu_index[rows],
                    exit_s - wait_s[ok],
                    exit_s,
                )
            )
            gpus.append(columns.gpu)
            if out.step_rank is None or rank < out.step_rank:  # rank 0, else the lowest
                out.step_rank = int(rank)
                out.steps = _steps(ev, st, columns.has_step[latest], t)
    out.ranks = len(ranks)
    out.barriers = _barriers(barrier_steps, barrier_t)
    out.waits = _waits(waits, gpus)
    return out


@dataclass(frozen=True)
class RankRecords:
    """One rank's records of its latest attempt as arrays, in file order (head timeline).

    For readers that need every rank's records rather than the aggregates (the trace
    export). ``event`` holds the codes ``RUN_START`` to ``RUN_END``; ``step`` is -1 and
    ``tokens`` 0 where the record has none; ``wait_s`` is NaN where it has none.
    """

    rank: int
    node: str
    event: IntArray
    step: IntArray
    has_step: npt.NDArray[np.bool_]
    t_s: FloatArray
    tokens: IntArray
    has_tokens: npt.NDArray[np.bool_]
    wait_s: FloatArray


def rank_records(
    files: list[Path], offsets_s: dict[str, float], hostnames: dict[str, str]
) -> Iterator[RankRecords]:
    """Each rank's latest attempt, one rank file at a time (as ``reduce_markers`` reads)."""
    for path in files:
        columns = _read(path)
        if columns is None:
            continue
        node_of = _resolve(columns, offsets_s, hostnames, set())
        offset = np.array([o for _, o in node_of], dtype=np.float64)
        t_s = columns.wall_s - offset[columns.who_index]
        for rank in np.unique(columns.rank).tolist():
            mine = np.flatnonzero(columns.rank == rank)
            latest = mine[
                _latest_attempt(columns.event[mine], columns.step[mine], columns.has_step[mine])
            ]
            yield RankRecords(
                rank=int(rank),
                node=node_of[int(columns.who_index[latest[0]])][0],
                event=columns.event[latest],
                step=columns.step[latest],
                has_step=columns.has_step[latest],
                t_s=t_s[latest],
                tokens=columns.tokens[latest],
                has_tokens=columns.has_tokens[latest],
                wait_s=columns.wait_s[latest],
            )


def _read(path: Path) -> _Columns | None:
    """A rank file's usable records as columns: Arrow's reader, else line by line."""
    try:
        # Arrow's JSON reader keeps text that is no UTF-8; it fails (UnicodeDecodeError,
        # a ValueError) only when read out: that file, too, is read line by line.
        return _from_table(pajson.read_json(path, parse_options=_PARSE))
    except (pa.ArrowInvalid, OSError, ValueError):
        return _from_records(_lines(path))


def _from_table(table: pa.Table) -> _Columns | None:
    usable = pc.and_(pc.is_valid(table.column("wall_s")), pc.is_valid(table.column("rank")))
    usable = pc.and_(usable, pc.is_in(table.column("event"), value_set=pa.array(_EVENTS)))
    table = table.filter(usable)
    if table.num_rows == 0:
        return None
    event = np.array(
        pc.index_in(table.column("event"), value_set=pa.array(_EVENTS))
        .to_numpy(zero_copy_only=False)
        .astype(np.int64)
    )
    step_col = table.column("step")
    has_step = pc.is_valid(step_col).to_numpy(zero_copy_only=False)
    step = pc.fill_null(step_col, _NO_STEP).to_numpy(zero_copy_only=False).astype(np.int64)
    who_codes, who_names = value_codes(pc.fill_null(table.column("node"), ""))
    _, first_rows = np.unique(who_codes, return_index=True)
    hosts = pc.fill_null(table.column("hostname"), "").take(pa.array(first_rows)).to_pylist()
    gpu_codes, gpu_names = value_codes(table.column("gpu_uuid"))
    tokens_col = table.column("tokens")
    return _Columns(
        event=event,
        step=step,
        has_step=np.asarray(has_step, dtype=bool),
        wall_s=table.column("wall_s").to_numpy().astype(np.float64),
        rank=table.column("rank").to_numpy().astype(np.int64),
        who=who_names,
        who_index=who_codes,
        hostnames=[str(h) for h in hosts],
        gpu=[*gpu_names, None],
        gpu_index=np.where(gpu_codes < 0, len(gpu_names), gpu_codes),
        tokens=pc.fill_null(tokens_col, 0).to_numpy(zero_copy_only=False).astype(np.int64),
        has_tokens=np.asarray(pc.is_valid(tokens_col).to_numpy(zero_copy_only=False), dtype=bool),
        wait_s=pc.fill_null(table.column("wait_s"), np.nan).to_numpy().astype(np.float64),
    )


def _lines(path: Path) -> list[dict[str, Any]]:
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


def _from_records(records: list[dict[str, Any]]) -> _Columns | None:
    """Records parsed line by line, with the same checks Arrow's schema makes."""

    def integer(value: object) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def number(value: object) -> float | None:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if ok else None  # type: ignore[arg-type]

    def text(value: object) -> str | None:
        return value if isinstance(value, str) else None

    rows = {name: [] for name in _SCHEMA.names}  # type: dict[str, list[Any]]
    for record in records:
        values = {
            "event": text(record.get("event")),
            "step": integer(record.get("step")),
            "wall_s": number(record.get("wall_s")),
            "rank": integer(record.get("rank")),
            "node": None if record.get("node") is None else str(record.get("node")),
            "hostname": None if record.get("hostname") is None else str(record.get("hostname")),
            "gpu_uuid": text(record.get("gpu_uuid")),
            "tokens": integer(record.get("tokens")),
            "wait_s": number(record.get("wait_s")),
        }
        for name, value in values.items():
            rows[name].append(value)
    table = pa.table({f.name: pa.array(rows[f.name], type=f.type) for f in _SCHEMA})
    return _from_table(table)


def _resolve(
    columns: _Columns, offsets_s: dict[str, float], hostnames: dict[str, str], unknown: set[str]
) -> list[tuple[str, float]]:
    """Each writer's node name and clock offset (0 s for a node the manifest lacks)."""
    resolved = []
    for who, host in zip(columns.who, columns.hostnames, strict=False):
        node = who if who in offsets_s else hostnames.get(who) or hostnames.get(host)
        if node is None:
            unknown.add(who)
        resolved.append((node or who, offsets_s.get(node or "", 0.0)))
    return resolved


def _latest_attempt(event: IntArray, step: IntArray, has_step: npt.NDArray[np.bool_]) -> IntArray:
    """Indices of each (event, step)'s latest record, after dropping superseded ones.

    A ``run_start`` after the first resumes from a checkpoint at its ``step``: records
    of the failed attempt for later steps are superseded (those steps run again).
    The first attempt's ``run_start`` stays: the run's window begins there, and of
    several ``run_start`` records with one step the first is kept.
    """
    kept = np.ones(event.size, dtype=bool)
    for j in np.flatnonzero(event == RUN_START)[1:].tolist():
        resumed_at = int(step[j]) if has_step[j] and step[j] else 0
        before = slice(0, j)
        kept[before] &= (event[before] == RUN_START) | (step[before] <= resumed_at)
    index = np.flatnonzero(kept)
    key = event[index] * (1 << 40) + np.where(has_step[index], step[index] + 1, 0)
    unique, group = np.unique(key, return_inverse=True)
    position = np.arange(index.size)
    last = np.full(unique.size, -1, dtype=np.int64)
    np.maximum.at(last, group, position)
    first = np.full(unique.size, index.size, dtype=np.int64)
    np.minimum.at(first, group, position)
    chosen = np.where(event[index[first]] == RUN_START, first, last)
    return np.asarray(index[np.sort(chosen)], dtype=np.int64)


def _steps(
    event: IntArray, step: IntArray, has_step: npt.NDArray[np.bool_], t_s: FloatArray
) -> list[StepSpan]:
    begins = (event == STEP_BEGIN) & has_step
    ends = (event == STEP_END) & has_step
    begin = dict(zip(step[begins].tolist(), t_s[begins].tolist(), strict=True))
    spans = [
        StepSpan(s, begin[s], t)
        for s, t in zip(step[ends].tolist(), t_s[ends].tolist(), strict=True)
        if s in begin
    ]
    return sorted(spans, key=lambda span: span.step)


def _barriers(steps: list[IntArray], times: list[FloatArray]) -> list[Barrier]:
    if not steps:
        return []
    step, t = np.concatenate(steps), np.concatenate(times)
    order = np.argsort(step, kind="stable")
    step, t = step[order], t[order]
    bounds = np.flatnonzero(np.diff(step)) + 1
    found = []
    for group_steps, group_t in zip(np.split(step, bounds), np.split(t, bounds), strict=True):
        if group_t.size:
            found.append(
                Barrier(
                    int(group_steps[0]),
                    float(np.median(group_t)),
                    float(group_t.max() - group_t.min()),
                    int(group_t.size),
                )
            )
    return sorted(found, key=lambda b: b.t_s)


def _waits(
    parts: list[tuple[IntArray, IntArray, list[str], IntArray, FloatArray, FloatArray]],
    gpus: list[list[str | None]],
) -> Waits:
    node_names = [name for part in parts for name in part[2]]
    device_names = [
        gpu_list[i] for part, gpu_list in zip(parts, gpus, strict=True) for i in part[3].tolist()
    ]
    nodes = sorted(set(node_names))
    devices = sorted({d for d in device_names if d is not None})
    node_index = {n: i for i, n in enumerate(nodes)}
    device_index = {d: i for i, d in enumerate(devices)}

    def joined(i: int, dtype: type) -> npt.NDArray[Any]:
        arrays = [part[i] for part in parts]
        return np.concatenate(arrays).astype(dtype) if arrays else np.empty(0, dtype=dtype)

    return Waits(
        step=joined(0, np.int64),
        rank=joined(1, np.int64),
        node=np.array([node_index[n] for n in node_names], dtype=np.int64),
        device=np.array(
            [device_index[d] if d is not None else -1 for d in device_names], dtype=np.int64
        ),
        enter_s=joined(4, np.float64),
        exit_s=joined(5, np.float64),
        nodes=nodes,
        devices=devices,
    )
