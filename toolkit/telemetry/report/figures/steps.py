"""Energy per optimizer step, per phase between barriers, and the run's figures."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolkit.rundir import MetricsLine, RunSummary, TrainThroughput
from toolkit.telemetry.report.figures.energy import NodeReport
from toolkit.telemetry.report.inputs.timeline import FloatArray, Timeline

# An interval is measured completely when its devices cover this share of it.
_COMPLETE = 1.0 - 1e-6


@dataclass(frozen=True)
class StepEnergy:
    """The energy of every node over one step of the reference rank.

    Attributes:
        step: The step number.
        start_s: Its ``step_begin`` on the head timeline.
        end_s: Its ``step_end`` on the head timeline.
        energy_j: All counted devices of all nodes over [start_s, end_s].
        complete: Whether every counted device measured the whole step.
    """

    step: int
    start_s: float
    end_s: float
    energy_j: float
    complete: bool

    @property
    def duration_s(self) -> float:
        """The step's length."""
        return self.end_s - self.start_s


@dataclass(frozen=True)
class StepStats:
    """The distribution of per-step energy over the completely measured steps.

    Attributes:
        steps: Steps in the distribution.
        incomplete: Steps a gap touched: left out, unless no step is complete.
        with_incomplete: Whether the distribution includes them (no step is complete).
        median_j: Median.
        p10_j: 10th percentile.
        p90_j: 90th percentile.
        mean_j: Mean.
        min_j: Lowest.
        max_j: Highest.
    """

    steps: int
    incomplete: int
    with_incomplete: bool
    median_j: float
    p10_j: float
    p90_j: float
    mean_j: float
    min_j: float
    max_j: float


@dataclass(frozen=True)
class Phase:
    """The span between two barriers (or the window's start or end and a barrier).

    Attributes:
        label: E.g. ``start - barrier 5``, ``barrier 5 - barrier 10``.
        start_s: Head-timeline start.
        end_s: Head-timeline end.
        steps: Reference-rank steps that ended in it.
        energy_j: All counted devices of all nodes.
        nodes_j: Node -> its energy.
        complete: Whether every counted device measured all of it.
    """

    label: str
    start_s: float
    end_s: float
    steps: int
    energy_j: float
    nodes_j: dict[str, float]
    complete: bool

    @property
    def duration_s(self) -> float:
        """The phase's length."""
        return self.end_s - self.start_s

    @property
    def avg_power_w(self) -> float:
        """Energy over duration."""
        return self.energy_j / self.duration_s if self.duration_s > 0 else 0.0


def interval_energy(
    nodes: dict[str, NodeReport], start_s: FloatArray, end_s: FloatArray
) -> tuple[dict[str, FloatArray], FloatArray]:
    """Per node, the counted devices' energy over each interval; and which are complete.

    An interval is complete when every counted device that measured anything at all
    measured all of it at its sample rate.
    """
    sums = IntervalSums(start_s, end_s)
    for node in nodes.values():
        sums.add(node)
    return sums.per_node, sums.complete


class IntervalSums:
    """Energy over fixed intervals, added up node by node.

    A node's curves are needed only while it is added, so the report can drop them
    before it reads the next node.
    """

    def __init__(self, start_s: FloatArray, end_s: FloatArray) -> None:
        """Intervals ``[start_s[i], end_s[i]]``; nothing added yet."""
        self.start_s = start_s
        self.end_s = end_s
        self.complete = np.ones(start_s.shape, dtype=bool)
        self.per_node: dict[str, FloatArray] = {}

    def add(self, node: NodeReport) -> None:
        """Add a node whose devices still have their curves."""
        start_s, end_s = self.start_s, self.end_s
        total = np.zeros(start_s.shape)
        for device in node.devices.values():
            curve = device.curve
            if not device.counted or curve is None:
                continue  # a device that measured nothing is left out of every figure
            total += curve.energy_j(start_s, end_s)
            self.complete &= curve.covered_s(start_s, end_s) >= _COMPLETE * (end_s - start_s)
        self.per_node[node.name] = total

    def total(self) -> FloatArray:
        """All nodes' energy per interval."""
        values = list(self.per_node.values())
        return np.sum(values, axis=0) if values else np.zeros(self.start_s.shape)


def step_sums(timeline: Timeline) -> IntervalSums:
    """Empty sums over the reference rank's steps."""
    return IntervalSums(
        np.array([s.begin_s for s in timeline.steps], dtype=np.float64),
        np.array([s.end_s for s in timeline.steps], dtype=np.float64),
    )


def step_energies(timeline: Timeline, sums: IntervalSums) -> list[StepEnergy]:
    """The energy of every node over each step of the reference rank (``step_sums``)."""
    if not timeline.steps:
        return []
    total = sums.total()
    return [
        StepEnergy(s.step, s.begin_s, s.end_s, float(total[i]), bool(sums.complete[i]))
        for i, s in enumerate(timeline.steps)
    ]


def step_stats(steps: list[StepEnergy]) -> StepStats | None:
    """Median, p10 and p90 (and more) of the complete steps; all steps if none is."""
    complete = [s.energy_j for s in steps if s.complete]
    used = complete or [s.energy_j for s in steps]
    if not used:
        return None
    values = np.array(used)
    p10, median, p90 = np.percentile(values, [10, 50, 90])
    return StepStats(
        steps=len(used),
        incomplete=sum(not s.complete for s in steps),
        with_incomplete=not complete,
        median_j=float(median),
        p10_j=float(p10),
        p90_j=float(p90),
        mean_j=float(values.mean()),
        min_j=float(values.min()),
        max_j=float(values.max()),
    )


def _phase_edges(timeline: Timeline) -> tuple[list[float], list[str]]:
    window = timeline.window
    barriers = [b for b in timeline.barriers if window.start_s < b.t_s < window.end_s]
    if not barriers:
        return [], []
    edges = [window.start_s, *(b.t_s for b in barriers), window.end_s]
    names = ["start", *(f"barrier {b.step}" for b in barriers), "end"]
    return edges, names


def phase_sums(timeline: Timeline) -> IntervalSums:
    """Empty sums over the spans between barriers (none without barriers)."""
    edges, _ = _phase_edges(timeline)
    return IntervalSums(np.array(edges[:-1], dtype=np.float64), np.array(edges[1:]))


def phases(timeline: Timeline, sums: IntervalSums) -> list[Phase]:
    """The spans between barriers (and from the start, and to the end); none without them."""
    edges, names = _phase_edges(timeline)
    if not edges:
        return []
    per_node, complete = sums.per_node, sums.complete
    step_ends = np.array([s.end_s for s in timeline.steps])
    return [
        Phase(
            label=f"{names[i]} - {names[i + 1]}",
            start_s=edges[i],
            end_s=edges[i + 1],
            steps=int(((step_ends > edges[i]) & (step_ends <= edges[i + 1])).sum()),
            energy_j=float(sum(v[i] for v in per_node.values())),
            nodes_j={name: float(v[i]) for name, v in per_node.items()},
            complete=bool(complete[i]),
        )
        for i in range(len(edges) - 1)
    ]


def run_figures(
    nodes: dict[str, NodeReport], timeline: Timeline, metrics: list[MetricsLine]
) -> RunSummary:
    """Totals and rates over the window (``summary.json``'s ``run``, as the sweep reads it)."""
    energy_j = float(sum(n.energy_j for n in nodes.values()))
    duration_s = timeline.window.duration_s
    steps: int | None = None
    tokens: int | None = None
    if timeline.window.basis == "markers":
        steps = len(timeline.steps) or None
        metric_tokens = [m.tokens for m in metrics]
        tokens = sum(metric_tokens) if metric_tokens else timeline.marker_tokens
    return RunSummary(
        duration_s=duration_s,
        energy_j=energy_j,
        steps=steps,
        tokens=tokens,
        energy_per_step_j=energy_j / steps if steps else None,
        energy_per_token_j=energy_j / tokens if tokens else None,
        tokens_per_s=tokens / duration_s if tokens and duration_s > 0 else None,
        tokens_per_j=tokens / energy_j if tokens and energy_j > 0 else None,
        partial=any(n.partial for n in nodes.values()),
        restarts=timeline.restarts,
        ranks=timeline.ranks,
        compile_s=TrainThroughput.of(metrics).compile_s,
    )
