"""Each rank's steps and barrier waits as arrays, one marker file at a time (for the trace).

A rank file written in one attempt is read as columns (Arrow's reader, as the report
reads it) and reduced with numpy: the last record of each step wins, as in
``markers.reduce_markers``. A file with a restart, a torn line or more than one node is
read record by record through ``markers.rank_markers`` (the report's own restart
handling), so both paths give the same spans.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from toolkit.telemetry.report.markers import (
    IntArray,
    Row,
    node_of,
    rank_markers,
    read_rank_table,
    step_spans,
)
from toolkit.telemetry.report.series import FloatArray

NO_TOKENS = -1


@dataclass(frozen=True)
class RankSlices:
    """One rank's completed steps and barrier waits (latest attempt, head timeline).

    Attributes:
        rank: The rank.
        node: Its node (the manifest's name, or the name its markers gave).
        step: Step numbers, ascending.
        begin_s: Each step's ``step_begin``.
        end_s: Each step's ``step_end``.
        tokens: Tokens its ``step_end`` counted, ``NO_TOKENS`` where it has none.
        barrier: Barrier step numbers, ascending.
        enter_s: When the rank reached each barrier (exit minus its wait).
        exit_s: When each barrier let it go.
    """

    rank: int
    node: str
    step: IntArray
    begin_s: FloatArray
    end_s: FloatArray
    tokens: IntArray
    barrier: IntArray
    enter_s: FloatArray
    exit_s: FloatArray


def rank_slices(
    files: list[Path], offsets_s: dict[str, float], hostnames: dict[str, str]
) -> Iterator[RankSlices]:
    """Every rank's slices, file by file (only one file's records held at a time)."""
    for path in files:
        table = read_rank_table(path)
        fast = _columns(table, offsets_s, hostnames) if table is not None else None
        if fast is not None:
            yield from fast
            continue
        for rank, latest in rank_markers([path], offsets_s, hostnames):
            if latest:
                yield _from_rows(rank, latest)


def _columns(
    table: pa.Table, offsets_s: dict[str, float], hostnames: dict[str, str]
) -> list[RankSlices] | None:
    """The file's ranks from its columns; None when it needs the record-by-record path."""
    table = table.filter(pc.and_(pc.is_valid(table["wall_s"]), pc.is_valid(table["rank"])))
    out = []
    for rank in pc.unique(table["rank"]).to_pylist():
        rows = table.filter(pc.equal(table["rank"], rank))
        events = rows["event"]
        if (pc.sum(pc.equal(events, "run_start")).as_py() or 0) > 1:
            return None  # a restart: superseded steps need the report's handling
        if pc.count_distinct(rows["node"]).as_py() > 1:
            return None
        who = rows["node"][0].as_py() or ""
        node = node_of(who, rows["hostname"][0].as_py(), offsets_s, hostnames)
        t_s = rows["wall_s"].to_numpy() - offsets_s.get(node or "", 0.0)
        begin = _last_by_step(rows, "step_begin", t_s)
        end = _last_by_step(rows, "step_end", t_s)
        barrier = _last_by_step(rows, "barrier", t_s)
        steps, b, e = np.intersect1d(begin[0], end[0], assume_unique=True, return_indices=True)
        tokens = end[2].to_numpy(zero_copy_only=False)[e]
        wait = barrier[3].to_numpy(zero_copy_only=False)
        waited = np.isfinite(wait) & (wait >= 0)
        out.append(
            RankSlices(
                rank=int(rank),
                node=node or who,
                step=steps.astype(np.int64),
                begin_s=begin[1][b],
                end_s=end[1][e],
                tokens=np.nan_to_num(tokens.astype(np.float64), nan=NO_TOKENS).astype(np.int64),
                barrier=barrier[0][waited],
                enter_s=(barrier[1] - np.nan_to_num(wait))[waited],
                exit_s=barrier[1][waited],
            )
        )
    return out


def _last_by_step(
    rows: pa.Table, event: str, t_s: FloatArray
) -> tuple[IntArray, FloatArray, pa.Array, pa.Array]:
    """Step numbers (ascending), times, tokens and waits of the last ``event`` of each step."""
    mask = pc.fill_null(pc.and_(pc.equal(rows["event"], event), pc.is_valid(rows["step"])), False)
    index = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
    steps = rows["step"].take(pa.array(index)).to_numpy()
    # np.unique keeps the first of equal values: search the reversed order for the last.
    unique, first_reversed = np.unique(steps[::-1], return_index=True)
    last = index[index.size - 1 - first_reversed]
    taken = pa.array(last, pa.int64())
    return (
        unique.astype(np.int64),
        t_s[last],
        pc.cast(rows["tokens"].take(taken), pa.float64()).combine_chunks(),
        rows["wait_s"].take(taken).combine_chunks(),
    )


def _from_rows(rank: int, latest: dict[tuple[str, int | None], Row]) -> RankSlices:
    spans = step_spans(latest)
    tokens = [latest[("step_end", s.step)].tokens for s in spans]
    waits = sorted(
        (step, row.t_s - row.wait_s, row.t_s)
        for (event, step), row in latest.items()
        if event == "barrier"
        and step is not None
        and row.wait_s is not None
        and math.isfinite(row.wait_s)
        and row.wait_s >= 0
    )
    return RankSlices(
        rank=rank,
        node=next(iter(latest.values())).node,
        step=np.array([s.step for s in spans], dtype=np.int64),
        begin_s=np.array([s.begin_s for s in spans], dtype=np.float64),
        end_s=np.array([s.end_s for s in spans], dtype=np.float64),
        tokens=np.array([NO_TOKENS if t is None else t for t in tokens], dtype=np.int64),
        barrier=np.array([w[0] for w in waits], dtype=np.int64),
        enter_s=np.array([w[1] for w in waits], dtype=np.float64),
        exit_s=np.array([w[2] for w in waits], dtype=np.float64),
    )
