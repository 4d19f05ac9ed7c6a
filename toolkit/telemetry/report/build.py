"""``build_report``: a run directory in, every figure of the report out (no files written).

Node by node: a node's samples are read, every figure that needs them is computed
(its devices' energy and gaps, its share of each step and phase, its cross-checks,
its bucketed views), and the samples are dropped before the next node is read. So
memory holds one node's trace at a time, whatever the cluster's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from toolkit.power.policy_summary import PowerSummary, summarize
from toolkit.power.records import read_power
from toolkit.rundir import RunDir, RunSummary
from toolkit.telemetry.report.figures.crosscheck import CrossCheck, check_windows, cross_checks
from toolkit.telemetry.report.figures.curves import gap_threshold_s
from toolkit.telemetry.report.figures.energy import NodeReport, node_report
from toolkit.telemetry.report.figures.marker_phases import MarkerPhase, marker_phases
from toolkit.telemetry.report.figures.steps import (
    Phase,
    StepEnergy,
    StepStats,
    phase_sums,
    phases,
    run_figures,
    step_energies,
    step_stats,
    step_sums,
)
from toolkit.telemetry.report.figures.straggler_causes import (
    SlownessScores,
    StragglerCause,
    StretchSignals,
    scores,
    straggler_causes,
)
from toolkit.telemetry.report.figures.stragglers import Stragglers, WaitEnergy, stragglers
from toolkit.telemetry.report.figures.views import Buckets
from toolkit.telemetry.report.inputs.load import RunData, load_run
from toolkit.telemetry.report.inputs.series import read_series
from toolkit.telemetry.report.inputs.timeline import Barrier, Timeline, Window, align


@dataclass(frozen=True)
class Report:
    """A run's telemetry report.

    Attributes:
        run_dir: The run directory.
        data: What was read from it.
        timeline: Samples and markers on the head's timeline, and the window.
        nodes: Node -> its figures (devices inside, with their bucketed views), in
            manifest order.
        run: The run's totals and rates.
        steps: Energy of each step of the reference rank.
        step_stats: The per-step energy distribution; None without steps.
        phases: Energy between barriers; empty without barriers.
        cross_checks: Counter against integrated power, per GPU.
        stragglers: Who arrived last at the barriers and what the waiting cost; None
            without barrier waits in the markers.
        notes: What the reader should know (lost nodes, gaps, restarts, disagreement).
        marker_phases: Time and energy per phase name the ranks marked (forward,
            backward, ...); empty without phase markers.
        power: What the run's power policy did (``power.jsonl``); None without one.
        causes: Why each straggler was late (``figures/straggler_causes.py``).
        slowness: Each rank's slowness score over the run and per window; None
            without waits.
    """

    run_dir: Path
    data: RunData
    timeline: Timeline
    nodes: dict[str, NodeReport]
    run: RunSummary
    steps: list[StepEnergy]
    step_stats: StepStats | None
    phases: list[Phase]
    cross_checks: list[CrossCheck]
    stragglers: Stragglers | None
    notes: list[str]
    marker_phases: list[MarkerPhase] = field(default_factory=list)
    power: PowerSummary | None = None
    causes: list[StragglerCause] = field(default_factory=list)
    slowness: SlownessScores | None = None

    @property
    def window(self) -> Window:
        """The span the report covers."""
        return self.timeline.window

    @property
    def barriers(self) -> list[Barrier]:
        """Barrier exits inside the window."""
        window = self.window
        return [b for b in self.timeline.barriers if window.start_s <= b.t_s <= window.end_s]

    @property
    def rate_hz(self) -> float:
        """The sampler's full-reading rate."""
        return self.data.manifest.rate_hz

    def relative_s(self, t_s: float) -> float:
        """A head-timeline time as seconds since the window's start."""
        return t_s - self.window.start_s


def build_report(run_dir: Path) -> Report:
    """Read ``run_dir`` and compute every figure of its report.

    Raises:
        ReportError: The run has no telemetry manifest or no samples.
    """
    data = load_run(Path(run_dir))
    timeline = align(data)
    window = timeline.window
    rate_hz = data.manifest.rate_hz
    threshold_s = gap_threshold_s(rate_hz)
    buckets = Buckets.over(window.start_s, window.end_s, rate_hz)
    spans = check_windows(window, timeline.barriers, max(10.0 / rate_hz, 1.0))
    step_energy, phase_energy = step_sums(timeline), phase_sums(timeline)
    wait_energy = WaitEnergy(timeline.waits) if timeline.waits is not None else None
    phase_spans = timeline.phases.spans if timeline.phases is not None else None
    marked_energy = WaitEnergy(phase_spans) if phase_spans is not None else None
    signals = StretchSignals(timeline.waits, timeline.phases) if timeline.waits else None
    nodes: dict[str, NodeReport] = {}
    checks: list[CrossCheck] = []
    read_notes: list[str] = []
    check_notes: list[str] = []
    for name, files in data.traces.items():
        node = data.manifest.nodes[name]
        series = read_series(name, files, node.offset_s, node.devices, read_notes)
        full = node_report(series, node, window, threshold_s, buckets)
        if signals is not None:
            signals.add(name, series)
        del series
        step_energy.add(full)
        phase_energy.add(full)
        if wait_energy is not None:
            wait_energy.add(full)
        if marked_energy is not None:
            marked_energy.add(full)
        node_checks, notes = cross_checks({name: full}, window, timeline.barriers, rate_hz, spans)
        checks += node_checks
        check_notes += notes
        nodes[name] = full.light()
    steps = step_energies(timeline, step_energy)
    run = run_figures(nodes, timeline, data.metrics)
    waiting = stragglers(timeline.waits, wait_energy, run.energy_j or 0.0)
    notes = [
        *data.notes,
        *read_notes,
        *timeline.notes,
        *_notes(nodes, timeline, run, checks),
        *check_notes,
    ]
    return Report(
        run_dir=Path(run_dir),
        data=data,
        timeline=timeline,
        nodes=nodes,
        run=run,
        steps=steps,
        step_stats=step_stats(steps),
        phases=phases(timeline, phase_energy),
        cross_checks=checks,
        stragglers=waiting,
        notes=notes,
        marker_phases=marker_phases(timeline.phases, marked_energy),
        power=_power(Path(run_dir)),
        causes=straggler_causes(signals, waiting) if signals is not None else [],
        slowness=scores(signals) if signals is not None else None,
    )


def _power(run_dir: Path) -> PowerSummary | None:
    """The power policy's outcome, when the run had one."""
    log = read_power(RunDir(run_dir).power)
    return summarize(log) if log is not None else None


def _notes(
    nodes: dict[str, NodeReport], timeline: Timeline, run: RunSummary, checks: list[CrossCheck]
) -> list[str]:
    notes: list[str] = []
    window = timeline.window
    if window.basis == "samples":
        notes.append("window taken from the samples (no step markers): no per-step figures")
    elif not timeline.steps:
        notes.append("no completed steps in the markers: no per-step figures")
    for node in nodes.values():
        why = f" ({node.error})" if node.error else ""
        if node.status == "lost":
            notes.append(f"node {node.name}: sampler lost{why}; its data is kept up to the loss")
        elif node.status == "missing":
            notes.append(f"node {node.name}: nothing collected{why}")
        for gap in node.gaps:
            covered = f"{node.covered_fraction:.0%} of the window covered"
            at = f"{gap.start_s - window.start_s:.1f} s"
            if gap.where == "trailing":
                notes.append(
                    f"node {node.name}: samples stop at {at}, {gap.duration_s:.1f} s before "
                    f"the window's end ({covered}; nothing after that is counted)"
                )
            elif gap.where != "no samples":
                notes.append(
                    f"node {node.name}: {gap.where} gap of {gap.duration_s:.1f} s at {at} "
                    f"({covered}; integrated power counts nothing there, an energy counter's "
                    "delta spans it)"
                )
            elif node.status != "missing":
                notes.append(f"node {node.name}: no samples in the window")
    if run.restarts:
        notes.append(
            f"the run resumed {run.restarts} time(s): re-run steps count once (the latest "
            "attempt); the window and energy include the failed attempts"
        )
    for check in checks:
        if check.flagged:
            ratio = f"{check.ratio:.3f}" if check.ratio is not None else "n/a"
            notes.append(
                f"{check.node}/{check.device}: integrated power and the energy counter differ "
                f"by more than 15% in {len(check.flagged)} of {len(check.windows)} windows "
                f"(overall power/counter {ratio}); totals use the counter"
            )
    spread = max((b.spread_s for b in timeline.barriers), default=0.0)
    if spread > 0.1:
        notes.append(
            f"barrier exits disagree by up to {spread:.3f} s across ranks after clock "
            "correction: the nodes' traces may be misaligned by about that much"
        )
    return notes
