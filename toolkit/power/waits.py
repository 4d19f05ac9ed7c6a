"""How long each rank waited for the last one at the steps of a window (pure).

The ranks' recent values at their steps' collectives come from their nodes
(``toolkit.stall.slow.node_steps``: a barrier's ``wait_s``, else the length of the
step's ``backward`` phase, in which DDP's all-reduce ends). At a step, ``value - min``
over the ranks is how long each waited for the last to arrive (the last waits least);
a window's wait is the mean of that over its steps. Ranks are then mapped to their GPUs
(``gpu_of``), by the GPU UUID their markers name, else by their local rank.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

from toolkit.stall.slow import RankSteps


def _values(
    ranks: Sequence[RankSteps], barrier: bool, first: int, last: int
) -> dict[int, dict[int, float]]:
    """Step -> rank -> value, of the chosen source, for steps ``first..last`` only.

    Each rank's steps are ascending: the window's are cut out by bisection, so the cost
    is the window's values, not every value a node sent.
    """
    by_step: dict[int, dict[int, float]] = {}
    for r in ranks:
        steps, values = (
            (r.barrier_steps, r.barrier_wait_s) if barrier else (r.backward_steps, r.backward_s)
        )
        lo, hi = bisect.bisect_left(steps, first), bisect.bisect_right(steps, last)
        for step, value in zip(steps[lo:hi], values[lo:hi], strict=True):
            by_step.setdefault(step, {})[r.rank] = value
    return by_step


def window_waits(ranks: Sequence[RankSteps], first_step: int, last_step: int) -> dict[int, float]:
    """Each rank's mean wait per step over steps ``first_step..last_step`` (inclusive).

    A step is counted when every rank has a value for it (by its barriers when they all
    have one there, else by its backward phases); a rank's wait at it is its value less
    the least. A window with no such step gives no waits (an empty mapping).
    """
    if len(ranks) < 2:
        return {}
    everyone = {r.rank for r in ranks}
    barrier = _values(ranks, True, first_step, last_step)
    backward = _values(ranks, False, first_step, last_step)
    totals = dict.fromkeys(everyone, 0.0)
    counted = 0
    for step in range(first_step, last_step + 1):
        values = barrier.get(step)
        if values is None or set(values) != everyone:
            values = backward.get(step)
        if values is None or set(values) != everyone:
            continue
        least = min(values.values())
        for rank, value in values.items():
            totals[rank] += value - least
        counted += 1
    if not counted:
        return {}
    return {rank: total / counted for rank, total in totals.items()}


def gpu_of(local_rank: int, gpu_uuid: str | None, gpus: Mapping[int, str]) -> int | None:
    """A rank's GPU index on its node: by its UUID, else its local rank (None: neither).

    Args:
        local_rank: The rank's rank on its node.
        gpu_uuid: The GPU its markers name (None: CUDA was not initialised then).
        gpus: The node's GPUs, index -> UUID.
    """
    if gpu_uuid is not None:
        for index, uuid in gpus.items():
            if uuid == gpu_uuid:
                return index
    return local_rank if local_rank in gpus else None
