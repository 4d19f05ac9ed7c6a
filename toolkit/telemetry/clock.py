"""Clock offsets between nodes, estimated from round trips to each node.

For each round, the head notes its wall clock before (``t0``) and after (``t1``) asking
the node for its wall clock (``t_node``). Assuming the answer was taken half-way, the
node's offset is ``t_node - (t0 + t1) / 2`` with an error of at most ``(t1 - t0) / 2``.
The estimate is the median over rounds, which shrugs off the slow round trips a busy
node or a garbage collection produces. A node time ``t`` maps to the head's timeline
as ``t - offset_s``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from toolkit.rundir.telemetry import ClockEntry, ClockOffset

__all__ = ["DEFAULT_ROUNDS", "ClockEntry", "ClockOffset", "combine", "estimate_offset"]

DEFAULT_ROUNDS = 15


def estimate_offset(
    node_wall_s: Callable[[], float],
    rounds: int = DEFAULT_ROUNDS,
    head_wall_s: Callable[[], float] = time.time,
) -> ClockOffset:
    """Estimate a node's clock offset from ``rounds`` calls of ``node_wall_s``.

    Args:
        node_wall_s: Asks the node for its ``time.time()`` (a blocking round trip).
        rounds: How many round trips (at least 1).
        head_wall_s: The head's clock (injectable for tests).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    offsets: list[float] = []
    rtts: list[float] = []
    for _ in range(rounds):
        t0 = head_wall_s()
        remote = node_wall_s()
        t1 = head_wall_s()
        offsets.append(remote - (t0 + t1) / 2)
        rtts.append(t1 - t0)
    return ClockOffset(
        offset_s=statistics.median(offsets),
        uncertainty_s=statistics.median(rtts) / 2,
        rounds=rounds,
        rtt_min_s=min(rtts),
    )


def combine(start: ClockOffset | None, end: ClockOffset | None) -> ClockEntry:
    """The manifest's clock entry: the mean of the start and end estimates, and both.

    The uncertainty covers both estimates and the drift between them.
    """
    known = [c for c in (start, end) if c is not None]
    if not known:
        return ClockEntry(0.0, None, None, None)
    offset_s = sum(c.offset_s for c in known) / len(known)
    drift_s = abs(known[0].offset_s - known[-1].offset_s) / 2
    return ClockEntry(offset_s, max(c.uncertainty_s for c in known) + drift_s, start, end)
