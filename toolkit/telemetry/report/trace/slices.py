"""A rank's steps, phases, barrier waits and own events as arrays, a file at a time.

The records come from ``markers.rank_records``: the report's own reading (Arrow's JSON
reader, line by line past a torn line) and restart handling (a resumed attempt
supersedes the failed one's later steps), so the trace shows the steps the figures
count.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from toolkit.telemetry.report.inputs.phase_markers import pair_phases
from toolkit.telemetry.report.inputs.rank_markers import (
    BARRIER,
    MARK,
    STEP_BEGIN,
    STEP_END,
    IntArray,
    RankRecords,
    rank_records,
)
from toolkit.telemetry.report.inputs.series import FloatArray

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
        names: The names of its phases and own events (``phase`` and ``mark`` index it).
        phase: Each phase's name, in order of its begin.
        phase_step: Its step (-1 for none).
        phase_begin_s: When it began.
        phase_end_s: When it ended.
        mark: Each own event's name (``toolkit.markers.mark``), in file order.
        mark_step: Its step (-1 for none).
        mark_s: When it was written.
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
    names: list[str]
    phase: IntArray
    phase_step: IntArray
    phase_begin_s: FloatArray
    phase_end_s: FloatArray
    mark: IntArray
    mark_step: IntArray
    mark_s: FloatArray


def rank_slices(
    files: list[Path], offsets_s: dict[str, float], hostnames: dict[str, str]
) -> Iterator[RankSlices]:
    """Every rank's slices, file by file (only one file's records held at a time)."""
    for records in rank_records(files, offsets_s, hostnames):
        yield _slices(records)


def _slices(r: RankRecords) -> RankSlices:
    begins = (r.event == STEP_BEGIN) & r.has_step
    ends = (r.event == STEP_END) & r.has_step
    # The latest attempt holds one record per (event, step): a step is a begin and an end.
    steps, b, e = np.intersect1d(
        r.step[begins], r.step[ends], assume_unique=True, return_indices=True
    )
    tokens = np.where(r.has_tokens[ends][e], r.tokens[ends][e], NO_TOKENS)
    waited = (r.event == BARRIER) & r.has_step & np.isfinite(r.wait_s) & (r.wait_s >= 0)
    order = np.argsort(r.step[waited], kind="stable")
    exit_s = r.t_s[waited][order]
    pairs = pair_phases(r.event, r.label, r.step, r.has_step)
    marks = (r.event == MARK) & (r.label >= 0)
    return RankSlices(
        rank=r.rank,
        node=r.node,
        step=steps.astype(np.int64),
        begin_s=r.t_s[begins][b],
        end_s=r.t_s[ends][e],
        tokens=tokens.astype(np.int64),
        barrier=r.step[waited][order],
        enter_s=exit_s - r.wait_s[waited][order],
        exit_s=exit_s,
        names=r.labels,
        phase=r.label[pairs.begin],
        phase_step=np.where(pairs.has_step, pairs.step, -1),
        phase_begin_s=r.t_s[pairs.begin],
        phase_end_s=r.t_s[pairs.end],
        mark=r.label[marks],
        mark_step=np.where(r.has_step[marks], r.step[marks], -1),
        mark_s=r.t_s[marks],
    )
