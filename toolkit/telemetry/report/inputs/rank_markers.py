"""One rank file's marker records as columns, and each rank's latest attempt.

A rank file is parsed into columns (Arrow's JSON reader, or line by line when a torn
line or text that is no UTF-8 defeats it); each writer's name is resolved to a node of
the manifest and its clock offset; a resumed run's superseded records are dropped with
array operations (``latest_attempt``). ``marker_summary.py`` reduces these columns to
the report's aggregates; ``rank_records`` hands every rank's records to the trace export.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from toolkit.telemetry.report.inputs.series import FloatArray, value_codes

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
        ("name", pa.string()),
        ("steps_from", pa.string()),
    ]
)
_PARSE = pajson.ParseOptions(explicit_schema=_SCHEMA, unexpected_field_behavior="ignore")
IntArray = npt.NDArray[np.int64]


# Event codes. Any other event is the user's own (``toolkit.markers.mark``): MARK, its
# name kept as the record's label; rtk's ``checkpoint`` plays no part in the report.
_EVENTS = ("run_start", "step_begin", "step_end", "barrier", "run_end", "phase_begin", "phase_end")
RUN_START, STEP_BEGIN, STEP_END, BARRIER, RUN_END, PHASE_BEGIN, PHASE_END = range(len(_EVENTS))
MARK = len(_EVENTS)
_IGNORED = ("checkpoint",)
_NO_STEP = -1  # a record without a step (as the restart rule compares it)


@dataclass
class MarkerColumns:
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
    label: IntArray  # a phase's name, a MARK's event (index into labels); -1 for none
    labels: list[str]
    steps_from: IntArray  # run_start's steps_from (index into steps_froms); -1 for none
    steps_froms: list[str]


@dataclass(frozen=True)
class RankRecords:
    """One rank's records of its latest attempt as arrays, in file order (head timeline).

    For readers that need every rank's records rather than the aggregates (the trace
    export). ``event`` holds the codes ``RUN_START`` to ``MARK``; ``step`` is -1 and
    ``tokens`` 0 where the record has none; ``wait_s`` is NaN where it has none;
    ``label`` indexes ``labels`` (a phase's name, a user event's name), -1 for none.
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
    label: IntArray
    labels: list[str]


def rank_records(
    files: list[Path], offsets_s: dict[str, float], hostnames: dict[str, str]
) -> Iterator[RankRecords]:
    """Each rank's latest attempt, one rank file at a time (as ``reduce_markers`` reads)."""
    for path in files:
        columns = read_columns(path)
        if columns is None:
            continue
        node_of = writer_nodes(columns, offsets_s, hostnames, set())
        offset = np.array([o for _, o in node_of], dtype=np.float64)
        t_s = columns.wall_s - offset[columns.who_index]
        for rank in np.unique(columns.rank).tolist():
            mine = np.flatnonzero(columns.rank == rank)
            latest = mine[
                latest_attempt(columns.event[mine], columns.step[mine], columns.has_step[mine])
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
                label=columns.label[latest],
                labels=columns.labels,
            )


def read_columns(path: Path) -> MarkerColumns | None:
    """A rank file's usable records as columns: Arrow's reader, else line by line."""
    try:
        # Arrow's JSON reader keeps text that is no UTF-8; it fails (UnicodeDecodeError,
        # a ValueError) only when read out: that file, too, is read line by line.
        return _from_table(pajson.read_json(path, parse_options=_PARSE))
    except (pa.ArrowInvalid, OSError, ValueError):
        return _from_records(_lines(path))


def _from_table(table: pa.Table) -> MarkerColumns | None:
    usable = pc.and_(pc.is_valid(table.column("wall_s")), pc.is_valid(table.column("rank")))
    usable = pc.and_(usable, pc.is_valid(table.column("event")))
    ignored = pc.is_in(table.column("event"), value_set=pa.array(_IGNORED))
    table = table.filter(pc.and_(usable, pc.invert(ignored)))
    if table.num_rows == 0:
        return None
    known = pc.index_in(table.column("event"), value_set=pa.array(_EVENTS))
    event = pc.fill_null(known, MARK).to_numpy(zero_copy_only=False).astype(np.int64)
    phase = pc.is_in(table.column("event"), value_set=pa.array(_EVENTS[PHASE_BEGIN:]))
    null_text = pa.scalar(None, pa.string())
    label_codes, labels = value_codes(
        pc.if_else(
            pc.is_null(known),
            table.column("event"),
            pc.if_else(phase, table.column("name"), null_text),
        )
    )
    from_codes, froms = value_codes(
        pc.if_else(pc.equal(known, RUN_START), table.column("steps_from"), null_text)
    )
    step_col = table.column("step")
    has_step = pc.is_valid(step_col).to_numpy(zero_copy_only=False)
    step = pc.fill_null(step_col, _NO_STEP).to_numpy(zero_copy_only=False).astype(np.int64)
    who_codes, who_names = value_codes(pc.fill_null(table.column("node"), ""))
    _, first_rows = np.unique(who_codes, return_index=True)
    hosts = pc.fill_null(table.column("hostname"), "").take(pa.array(first_rows)).to_pylist()
    gpu_codes, gpu_names = value_codes(table.column("gpu_uuid"))
    tokens_col = table.column("tokens")
    return MarkerColumns(
        event=np.asarray(event, dtype=np.int64),
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
        label=label_codes,
        labels=labels,
        steps_from=from_codes,
        steps_froms=froms,
    )


def _lines(path: Path) -> list[Mapping[str, object]]:
    records: list[Mapping[str, object]] = []
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def _from_records(records: list[Mapping[str, object]]) -> MarkerColumns | None:
    """Records parsed line by line, with the same checks Arrow's schema makes."""

    def integer(value: object) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def number(value: object) -> float | None:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if ok else None  # type: ignore[arg-type]

    def text(value: object) -> str | None:
        return value if isinstance(value, str) else None

    rows: dict[str, list[object]] = {name: [] for name in _SCHEMA.names}
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
            "name": text(record.get("name")),
            "steps_from": text(record.get("steps_from")),
        }
        for name, value in values.items():
            rows[name].append(value)
    table = pa.table({f.name: pa.array(rows[f.name], type=f.type) for f in _SCHEMA})
    return _from_table(table)


def writer_nodes(
    columns: MarkerColumns,
    offsets_s: dict[str, float],
    hostnames: dict[str, str],
    unknown: set[str],
) -> list[tuple[str, float]]:
    """Each writer's node name and clock offset (0 s for a node the manifest lacks)."""
    resolved = []
    for who, host in zip(columns.who, columns.hostnames, strict=False):
        node = who if who in offsets_s else hostnames.get(who) or hostnames.get(host)
        if node is None:
            unknown.add(who)
        resolved.append((node or who, offsets_s.get(node or "", 0.0)))
    return resolved


def latest_attempt(event: IntArray, step: IntArray, has_step: npt.NDArray[np.bool_]) -> IntArray:
    """Indices of each (event, step)'s latest record, after dropping superseded ones.

    A ``run_start`` after the first resumes from a checkpoint at its ``step``: records
    of the failed attempt for later steps are superseded (those steps run again).
    The first attempt's ``run_start`` stays: the run's window begins there, and of
    several ``run_start`` records with one step the first is kept. Phases and user
    events are many to a step: every one of them not superseded is kept.
    """
    kept = np.ones(event.size, dtype=bool)
    for j in np.flatnonzero(event == RUN_START)[1:].tolist():
        resumed_at = int(step[j]) if has_step[j] and step[j] else 0
        before = slice(0, j)
        kept[before] &= (event[before] == RUN_START) | (step[before] <= resumed_at)
    index = np.flatnonzero(kept)
    many = index[event[index] >= PHASE_BEGIN]
    index = index[event[index] < PHASE_BEGIN]
    key = event[index] * (1 << 40) + np.where(has_step[index], step[index] + 1, 0)
    unique, group = np.unique(key, return_inverse=True)
    position = np.arange(index.size)
    last = np.full(unique.size, -1, dtype=np.int64)
    np.maximum.at(last, group, position)
    first = np.full(unique.size, index.size, dtype=np.int64)
    np.minimum.at(first, group, position)
    chosen = np.where(event[index[first]] == RUN_START, first, last)
    if many.size:
        return np.sort(np.concatenate([index[chosen], many])).astype(np.int64)
    return np.asarray(index[np.sort(chosen)], dtype=np.int64)
