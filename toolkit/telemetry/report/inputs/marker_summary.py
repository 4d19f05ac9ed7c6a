"""The trainer's markers, read one rank file at a time and reduced to what the report needs.

A thousand ranks writing for hours leave millions of marker records; the report never
holds them as Python objects. Each rank's file is parsed into columns (Arrow's JSON
reader, or line by line when a torn line defeats it: ``rank_markers.py``), its restarts
resolved with array operations, and only small aggregates kept: the window's ends, the
reference rank's steps, every barrier's exit and every rank's wait at it (or at the
step's collective, from backward phases: ``phase_markers.py``), every rank's phases,
tokens, restarts, the user's events counted by name, and how the steps were found.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from toolkit.telemetry.report.inputs.phase_markers import (
    BACKWARD,
    PhasePairs,
    collective_waits,
    last_per_step,
    pair_phases,
)
from toolkit.telemetry.report.inputs.rank_markers import (
    BARRIER,
    MARK,
    RUN_END,
    RUN_START,
    STEP_BEGIN,
    STEP_END,
    IntArray,
    MarkerColumns,
    latest_attempt,
    read_columns,
    writer_nodes,
)
from toolkit.telemetry.report.inputs.series import FloatArray
from toolkit.telemetry.report.inputs.spans import Phases, SpanPart, Waits, join_spans

AUTO = "auto"  # run_start's steps_from under --auto-steps
INPUT = "input"  # the phase derived between an --auto-steps rank's steps

__all__ = ["Barrier", "MarkerSummary", "Phases", "StepSpan", "StepsFrom", "Waits", "reduce_markers"]


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
class StepsFrom:
    """How the ranks found their steps (``run_start``'s ``steps_from``).

    Attributes:
        ranks: Each value written -> how many ranks wrote it.
        unknown: Ranks whose ``run_start`` has none (older writers).
    """

    ranks: dict[str, int]
    unknown: int

    @property
    def value(self) -> str | None:
        """The one value every rank wrote; None when they differ or none wrote one."""
        return next(iter(self.ranks)) if len(self.ranks) == 1 and not self.unknown else None


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
        waits: Every rank's wait at every barrier (or the step's collective).
        unknown_nodes: Nodes markers named that the manifest does not have.
        phases: Every rank's phases; None without phase records.
        marks: The user's own events: name -> records, over every rank.
        steps_from: How the steps were found; None when no run_start says.
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
    phases: Phases | None = None
    marks: dict[str, int] = field(default_factory=dict)
    steps_from: StepsFrom | None = None


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
    waits: list[SpanPart] = []
    phases = _PhaseParts()
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
                SpanPart(
                    step=columns.step[rows],
                    rank=int(rank),
                    node=columns.who_index[rows],
                    device=columns.gpu_index[rows],
                    enter_s=exit_s - wait_s[ok],
                    exit_s=exit_s,
                    names=names,
                    gpus=columns.gpu,
                )
            )
            phases.add(columns, int(rank), latest, t, names)
            if out.step_rank is None or rank < out.step_rank:  # rank 0, else the lowest
                out.step_rank = int(rank)
                out.steps = _steps(ev, st, columns.has_step[latest], t)
    out.ranks = len(ranks)
    out.barriers = _barriers(barrier_steps, barrier_t)
    with_barriers = np.unique(np.concatenate(barrier_steps)) if barrier_steps else np.empty(0)
    derived = collective_waits(phases.backward, with_barriers.astype(np.int64))
    out.waits = join_spans([*waits, *derived], [False] * len(waits) + [True] * len(derived))
    out.phases = phases.joined()
    out.marks = dict(sorted(phases.marks.items()))
    if phases.steps_from:
        out.steps_from = StepsFrom(dict(phases.steps_from.most_common()), phases.steps_from_unknown)
    return out


class _PhaseParts:
    """Phases, backward phases, the user's events and how the steps were found, by rank."""

    def __init__(self) -> None:
        self.parts: list[SpanPart] = []
        self.backward: list[SpanPart] = []
        self.names: dict[str, int] = {}
        self.marks: Counter[str] = Counter()
        self.steps_from: Counter[str] = Counter()
        self.steps_from_unknown = 0

    def add(
        self, columns: MarkerColumns, rank: int, latest: IntArray, t_s: FloatArray, names: list[str]
    ) -> None:
        """One rank's latest attempt: ``latest`` rows of ``columns``, ``t_s`` their times."""
        event, label = columns.event[latest], columns.label[latest]
        starts = latest[event == RUN_START]
        code = int(columns.steps_from[starts[0]]) if starts.size else -1
        auto = code >= 0 and columns.steps_froms[code] == AUTO
        if code >= 0:
            self.steps_from[columns.steps_froms[code]] += 1
        elif starts.size:
            self.steps_from_unknown += 1
        marks = label[event == MARK]
        for code, count in enumerate(np.bincount(marks[marks >= 0]).tolist()):
            if count:
                self.marks[columns.labels[code]] += count
        pairs = pair_phases(event, label, columns.step[latest], columns.has_step[latest])
        if pairs.begin.size:
            self._marked(columns, rank, latest, t_s, names, pairs)
        if auto:
            self._input_gaps(columns, rank, latest, t_s, names)

    def _marked(
        self,
        columns: MarkerColumns,
        rank: int,
        latest: IntArray,
        t_s: FloatArray,
        names: list[str],
        pairs: PhasePairs,
    ) -> None:
        """The rank's marked phases (and, apart, its last backward of each step)."""
        label = columns.label[latest]
        used = np.unique(label[pairs.begin]).tolist()
        to_name = np.full(len(columns.labels), -1, dtype=np.int64)
        for code in used:
            to_name[code] = self.names.setdefault(columns.labels[code], len(self.names))
        rows = latest[pairs.begin]

        def part(which: IntArray, labelled: bool) -> SpanPart:
            return SpanPart(
                step=np.where(pairs.has_step[which], pairs.step[which], -1),
                rank=rank,
                node=columns.who_index[rows[which]],
                device=columns.gpu_index[rows[which]],
                enter_s=t_s[pairs.begin[which]],
                exit_s=t_s[pairs.end[which]],
                names=names,
                gpus=columns.gpu,
                label=to_name[label[pairs.begin[which]]] if labelled else None,
            )

        self.parts.append(part(np.arange(pairs.begin.size), True))
        if BACKWARD in columns.labels:
            last = last_per_step(pairs, label, columns.labels.index(BACKWARD))
            if last.size:
                self.backward.append(part(last, False))

    def _input_gaps(
        self, columns: MarkerColumns, rank: int, latest: IntArray, t_s: FloatArray, names: list[str]
    ) -> None:
        """The rank's ``input`` phases, between one step's end and the next's beginning.

        Under ``--auto-steps`` a step begins at the model's first forward and ends at
        the optimizer's step: what lies between is the data loader, above all.
        """
        event, step = columns.event[latest], columns.step[latest]
        has_step = columns.has_step[latest]
        ends = np.flatnonzero((event == STEP_END) & has_step)
        begins = np.flatnonzero((event == STEP_BEGIN) & has_step)
        end_at = dict(zip(step[ends].tolist(), ends.tolist(), strict=True))
        gaps = [
            (int(step[b]), end_at[int(step[b]) - 1], b)
            for b in begins.tolist()
            if int(step[b]) - 1 in end_at and t_s[b] >= t_s[end_at[int(step[b]) - 1]]
        ]
        if not gaps:
            return
        after = np.array([g[1] for g in gaps], dtype=np.int64)
        before = np.array([g[2] for g in gaps], dtype=np.int64)
        code = self.names.setdefault(INPUT, len(self.names))
        self.parts.append(
            SpanPart(
                step=np.array([g[0] for g in gaps], dtype=np.int64),
                rank=rank,
                node=columns.who_index[latest[before]],
                device=columns.gpu_index[latest[before]],
                enter_s=t_s[after],
                exit_s=t_s[before],
                names=names,
                gpus=columns.gpu,
                label=np.full(len(gaps), code, dtype=np.int64),
            )
        )

    def joined(self) -> Phases | None:
        """Every rank's phases; None without any."""
        if not self.parts:
            return None
        name = np.concatenate([p.label for p in self.parts if p.label is not None])
        return Phases(join_spans(self.parts), name.astype(np.int64), list(self.names))


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
