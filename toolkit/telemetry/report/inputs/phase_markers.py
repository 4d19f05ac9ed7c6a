"""Phases from ``phase_begin``/``phase_end`` records, and the waits they reveal.

A rank's phases are paired by name: each ``phase_end`` closes the ``phase_begin`` of
the same name just before it (an unmatched one, as a crash leaves, is dropped). A
phase belongs to its begin's step (its end's when the begin has none).

The step's collective (docs/markers.md): under DDP the gradient all-reduce ends inside
backward, so a rank that enters backward late makes the others wait there. For each
step, every rank's last ``backward`` phase gives ``dur_r = end_r - begin_r``; the rank
with the shortest waited least (nothing, as far as the markers tell), so
``wait_r = dur_r - min(dur)`` over the ranks that have the step, its exit is ``end_r``
and its arrival ``end_r - wait_r``. Steps with barrier records use those instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolkit.telemetry.report.inputs.rank_markers import PHASE_BEGIN, PHASE_END, IntArray
from toolkit.telemetry.report.inputs.series import FloatArray
from toolkit.telemetry.report.inputs.spans import BoolArray, SpanPart

BACKWARD = "backward"


@dataclass(frozen=True)
class PhasePairs:
    """One rank's phases: rows of its records (file order) where each begins and ends."""

    begin: IntArray
    end: IntArray
    step: IntArray  # -1 where the phase has none
    has_step: BoolArray


def pair_phases(
    event: IntArray, label: IntArray, step: IntArray, has_step: BoolArray
) -> PhasePairs:
    """Pair one rank's ``phase_begin`` and ``phase_end`` records (its latest attempt)."""
    rows = np.flatnonzero(((event == PHASE_BEGIN) | (event == PHASE_END)) & (label >= 0))
    order = rows[np.lexsort((rows, label[rows]))]  # by name, then in file order
    before, after = order[:-1], order[1:]
    paired = (
        (event[before] == PHASE_BEGIN)
        & (event[after] == PHASE_END)
        & (label[before] == label[after])
    )
    begin, end = before[paired], after[paired]
    chrono = np.argsort(begin, kind="stable")
    begin, end = begin[chrono], end[chrono]
    from_begin = has_step[begin]
    return PhasePairs(
        begin=begin,
        end=end,
        step=np.where(from_begin, step[begin], step[end]),
        has_step=from_begin | has_step[end],
    )


def last_per_step(pairs: PhasePairs, label: IntArray, name_code: int) -> IntArray:
    """Indices into ``pairs`` of the last phase of each step with label ``name_code``."""
    mine = np.flatnonzero((label[pairs.begin] == name_code) & pairs.has_step)
    if not mine.size:
        return mine
    steps = pairs.step[mine]
    order = np.lexsort((pairs.begin[mine], steps))
    ordered = steps[order]
    last = np.append(ordered[1:] != ordered[:-1], True)
    return np.asarray(mine[order[last]], dtype=np.int64)


def collective_waits(parts: list[SpanPart], barrier_steps: IntArray) -> list[SpanPart]:
    """Each rank's wait at the collective of every step without barrier records.

    ``parts`` hold each rank's last backward phase of each step (``enter_s``: its
    begin, ``exit_s``: its end); the result, the same ranks' waits.
    """
    if not parts:
        return []
    step = np.concatenate([p.step for p in parts])
    dur = np.concatenate([p.exit_s - p.enter_s for p in parts])
    steps, group = np.unique(step, return_inverse=True)
    shortest = np.full(steps.size, np.inf)
    np.minimum.at(shortest, group, dur)
    wait_all: FloatArray = dur - shortest[group]
    out, start = [], 0
    for part in parts:
        wait, start = wait_all[start : start + part.step.size], start + part.step.size
        keep = ~np.isin(part.step, barrier_steps)
        out.append(
            SpanPart(
                step=part.step[keep],
                rank=part.rank,
                node=part.node[keep],
                device=part.device[keep],
                enter_s=part.exit_s[keep] - wait[keep],
                exit_s=part.exit_s[keep],
                names=part.names,
                gpus=part.gpus,
            )
        )
    return out
