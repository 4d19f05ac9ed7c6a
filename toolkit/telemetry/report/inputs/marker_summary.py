"""The trainer's markers, read one rank file at a time and reduced to what the report needs.

A thousand ranks writing for hours leave millions of marker records; the report never
holds them as Python objects. Each rank's file is parsed into columns (Arrow's JSON
reader, or line by line when a torn line defeats it: ``rank_markers.py``), its restarts
resolved with array operations, and only small aggregates kept: the window's ends, the
reference rank's steps, every barrier's exit and every rank's wait at it, tokens and
restarts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from toolkit.telemetry.report.inputs.rank_markers import (
    BARRIER,
    RUN_END,
    RUN_START,
    STEP_BEGIN,
    STEP_END,
    IntArray,
    latest_attempt,
    read_columns,
    writer_nodes,
)
from toolkit.telemetry.report.inputs.series import FloatArray


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
    barrier_steps: list[IntArray] = []
    barrier_t: list[FloatArray] = []
    waits: list[tuple[IntArray, IntArray, list[str], IntArray, FloatArray, FloatArray]] = []
    gpus: list[list[str | None]] = []
    ranks: set[int] = set()
    for path in files:
        columns = read_columns(path)
        if columns is None:
            continue
        node_of = writer_nodes(columns, offsets_s, hostnames, out.unknown_nodes)
        names = [name for name, _ in node_of]
        offset = np.array([o for _, o in node_of], dtype=np.float64)
        t_s = columns.wall_s - offset[columns.who_index]
        for rank in np.unique(columns.rank).tolist():
            mine = np.flatnonzero(columns.rank == rank)
            ranks.add(int(rank))
            event, step = columns.event[mine], columns.step[mine]
            out.restarts = max(out.restarts, int((event == RUN_START).sum()) - 1)
            latest = mine[latest_attempt(event, step, columns.has_step[mine])]
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
