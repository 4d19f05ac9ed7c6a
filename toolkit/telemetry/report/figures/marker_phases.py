"""Time and energy per phase name (forward, backward, optimizer, data, the user's own).

The ranks mark their phases (``toolkit.markers.phase``); per name, each rank's time in
it over the run, and how those totals spread over the ranks (median, max, the slowest
rank), and the energy the ranks' devices used during it (each rank's GPU, or its share
of its host, as for the waits: ``stragglers.WaitEnergy``). Not to be confused with the
phases between barriers (``steps.Phase``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolkit.telemetry.report.figures.stragglers import WaitEnergy
from toolkit.telemetry.report.inputs.spans import Phases


@dataclass(frozen=True)
class MarkerPhase:
    """One phase name over the run.

    Attributes:
        name: The phase's name.
        count: Phases of this name, all ranks together.
        ranks: Ranks that ran it.
        total_s: Time in it, all ranks together.
        median_rank_s: The median over those ranks of each rank's time in it.
        max_rank_s: The most time any rank spent in it.
        slowest_rank: That rank (the lowest of several).
        energy_j: Energy of the ranks' devices during it; None where no curve covers it.
    """

    name: str
    count: int
    ranks: int
    total_s: float
    median_rank_s: float
    max_rank_s: float
    slowest_rank: int
    energy_j: float | None


def marker_phases(phases: Phases | None, energy: WaitEnergy | None) -> list[MarkerPhase]:
    """Per phase name, in the order the names were first seen; empty without phases."""
    if phases is None or not len(phases):
        return []
    spans = phases.spans
    dur_s = np.maximum(spans.wait_s, 0.0)
    ranks = np.unique(spans.rank)
    key = phases.name * ranks.size + np.searchsorted(ranks, spans.rank)
    keys, group = np.unique(key, return_inverse=True)
    per_rank_s = np.bincount(group, weights=dur_s, minlength=keys.size)
    joules = energy.energy_j if energy is not None else np.full(len(spans), np.nan)
    found = []
    for code, name in enumerate(phases.names):
        mine = np.flatnonzero(keys // ranks.size == code)
        if not mine.size:
            continue
        totals = per_rank_s[mine]
        slowest = mine[np.argmax(totals)]  # keys ascend with rank: the lowest of a tie
        measured = joules[phases.name == code]
        measured = measured[~np.isnan(measured)]
        found.append(
            MarkerPhase(
                name=name,
                count=int((phases.name == code).sum()),
                ranks=int(mine.size),
                total_s=float(totals.sum()),
                median_rank_s=float(np.median(totals)),
                max_rank_s=float(totals.max()),
                slowest_rank=int(ranks[keys[slowest] % ranks.size]),
                energy_j=float(measured.sum()) if measured.size else None,
            )
        )
    return found
