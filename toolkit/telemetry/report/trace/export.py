"""report/trace.json.gz: the aligned timeline as a Chrome trace-event file for Perfetto.

One process per node (``process_name`` = the node), one thread per rank (``rank N``)
holding its steps (``step N``), the phases it marked inside them (``forward``,
``backward``, ...; cut to their step's span so they nest in it) and barrier waits
(``barrier N wait``) as complete events, its own events (``mark``) as instants, and per
device counter tracks (``GPU 0 (GPU-0a1b2c3d) power_w``, ``sm_clock_mhz``,
``temperature_c``; ``host power_w``). ui.perfetto.dev opens the gzip file as it is.

Times are the head's wall clock in integer microseconds since the Unix epoch: every
node's samples and markers minus its clock offset (the report's timeline), so a skewed
node lines up with the others, and a PyTorch profiler trace of the same run lines up
once its own base time is added (docs/telemetry.md).

The size stays bounded at any scale: counters come from the report's bucketed views (at
most ``MAX_BUCKETS`` points per device, a point equal to the one before left out), and
above ``max_slices`` only every k-th step is kept, with its phases and own events
(barrier waits too, if they alone exceed half of it); the file says so in
``otherData``. With a window (``--trace-window``) the counters are every sample in it,
read node by node and batch by batch. Slices are read one rank file at a time and
everything is written as it is made: no event list is ever held. The pieces: ``events``
(the file format), ``counters`` (the counter tracks), ``slices`` (a rank's steps,
phases, waits and own events from its marker file).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from toolkit.errors import ReportError
from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.inputs.timeline import Timeline
from toolkit.telemetry.report.trace.counters import bucket_counters, sample_counters
from toolkit.telemetry.report.trace.events import (
    PID_BASE,
    TID_BASE,
    TraceEventWriter,
    number,
    open_trace,
    to_us,
)
from toolkit.telemetry.report.trace.slices import NO_TOKENS, RankSlices, rank_slices

TRACE_FILE = "trace.json.gz"
DEFAULT_MAX_SLICES = 250_000


@dataclass(frozen=True)
class TraceWindow:
    """A span to export at full resolution, in seconds since the run's start."""

    start_s: float
    end_s: float

    @classmethod
    def parse(cls, text: str) -> TraceWindow:
        """``START:END`` (seconds since the run's start, START < END).

        Raises:
            ReportError: Not two numbers, or END not after START.
        """
        start, sep, end = text.partition(":")
        try:
            window = cls(float(start), float(end)) if sep else None
        except ValueError:
            window = None
        if window is None or not (math.isfinite(window.start_s) and math.isfinite(window.end_s)):
            raise ReportError(
                f"trace window {text!r}: expected START:END in seconds since the run's start, "
                "e.g. 120:180"
            )
        if window.end_s <= window.start_s:
            raise ReportError(f"trace window {text!r}: END must be after START")
        return window


@dataclass(frozen=True)
class SlicePlan:
    """Which steps and barrier waits become slices.

    Attributes:
        ranks: Ranks with markers.
        steps: The reference rank's steps in the span.
        waits: Barrier waits (all ranks) in the span.
        max_slices: The cap.
        step_every: Every how many steps one is kept (1: all).
        barrier_every: Every how many barriers one is kept (1: all).
        kept_steps: The step numbers kept; None for all.
        kept_barriers: The barrier step numbers kept; None for all.
        phases: Phases (all ranks) in the span; they go with their steps.
    """

    ranks: int
    steps: int
    waits: int
    max_slices: int
    step_every: int = 1
    barrier_every: int = 1
    kept_steps: frozenset[int] | None = None
    kept_barriers: frozenset[int] | None = None
    phases: int = 0

    @property
    def capped(self) -> bool:
        """Whether slices were left out."""
        return self.step_every > 1 or self.barrier_every > 1

    def describe(self) -> str:
        """What the slices are, in a sentence."""
        full = self.ranks * self.steps + self.waits + self.phases
        if not self.capped:
            what = "step, phase" if self.phases else "step"
            return f"every {what} and barrier wait of {self.ranks} ranks ({full:,} slices)"
        if self.kept_steps is not None and not self.kept_steps:
            steps = "no step"
        elif self.step_every == 1:
            steps = "every step"
        else:
            steps = f"every {_nth(self.step_every)} step"
        if self.phases and self.kept_steps != frozenset():
            steps += " (with its phases)"
        waits = (
            "every barrier wait"
            if self.barrier_every == 1
            else f"the waits at every {_nth(self.barrier_every)} barrier"
        )
        return (
            f"{steps} and {waits} of {self.ranks} ranks: {full:,} slices exceed the cap of "
            f"{self.max_slices:,} (rtk report --trace-window START:END exports a span in full)"
        )


@dataclass(frozen=True)
class TraceExport:
    """What ``write_trace`` wrote.

    Attributes:
        path: The gzip JSON file.
        span_s: The exported span (head timeline, seconds since the epoch).
        resolution: ``buckets`` (the report's views) or ``samples`` (a window, in full).
        slices: Step, phase and barrier-wait slices written.
        counter_points: Counter events written.
        plan: Which slices were kept.
        instants: The ranks' own events written (``mark``).
    """

    path: Path
    span_s: tuple[float, float]
    resolution: str
    slices: int
    counter_points: int
    plan: SlicePlan
    instants: int = 0

    @property
    def notes(self) -> list[str]:
        """What the reader should know (what the cap left out)."""
        return [f"trace: {self.plan.describe()}"] if self.plan.capped else []


def write_trace(
    report: Report,
    path: Path,
    window: TraceWindow | None = None,
    max_slices: int = DEFAULT_MAX_SLICES,
) -> TraceExport:
    """Write the trace-event file of ``report`` to ``path`` (gzip JSON).

    Args:
        report: What ``build_report`` returned.
        path: Where to write (``report/trace.json.gz``); replaced when complete.
        window: Export only this span, with every sample in it; the whole window at the
            report's bucket resolution when None.
        max_slices: Above this many slices, keep only every k-th step (and barrier).
    """
    start = report.window.start_s
    if window is None:
        span = (start, report.window.end_s)
    else:
        span = (start + window.start_s, start + window.end_s)
    plan = plan_slices(report.timeline, span, max_slices)
    pids = {name: PID_BASE + i for i, name in enumerate(report.nodes)}
    with open_trace(path, _other_data(report, span, plan, window)) as out:
        for name, pid in pids.items():
            out.process(pid, name, pid - PID_BASE)
        if window is None:
            counters = bucket_counters(report, pids, out)
        else:
            counters = sample_counters(report, pids, span, out)
        slices, instants = _slices(report, pids, span, plan, out)
    resolution = "buckets" if window is None else "samples"
    return TraceExport(path, span, resolution, slices, counters, plan, instants)


def plan_slices(timeline: Timeline, span: tuple[float, float], max_slices: int) -> SlicePlan:
    """Keep every step, phase and wait in ``span`` unless they exceed ``max_slices``.

    Over the cap, barrier waits are kept in full while they are at most half of it
    (else every k-th barrier), and the steps share the rest with their phases: every
    k-th step number, the same on every rank.
    """
    lo, hi = span
    steps = sorted(s.step for s in timeline.steps if s.begin_s <= hi and s.end_s >= lo)
    waits = timeline.waits
    barriers: list[int] = []
    n_waits = 0
    if waits is not None and len(waits):
        inside = (waits.enter_s <= hi) & (waits.exit_s >= lo)
        if waits.backward is not None:  # the trace draws barrier waits, not derived ones
            inside &= ~waits.backward
        n_waits = int(inside.sum())
        barriers = sorted({int(s) for s in waits.step[inside]})
    n_phases = 0
    if timeline.phases is not None:
        spans = timeline.phases.spans
        n_phases = int(((spans.enter_s <= hi) & (spans.exit_s >= lo)).sum())
    ranks = timeline.ranks
    plan = SlicePlan(ranks, len(steps), n_waits, max_slices, phases=n_phases)
    if ranks * len(steps) + n_waits + n_phases <= max_slices:
        return plan
    barrier_every, kept_waits = 1, n_waits
    half = max_slices // 2
    if n_waits > half:
        per_barrier = math.ceil(n_waits / len(barriers))
        barrier_every = math.ceil(len(barriers) / max(half // per_barrier, 1))
        kept_waits = math.ceil(len(barriers) / barrier_every) * per_barrier
    # A step costs a slice per rank and its share of the phases.
    per_step = ranks + (math.ceil(n_phases / len(steps)) if steps else 0)
    per_rank = (max_slices - kept_waits) // per_step if per_step else 0
    step_every = 1
    if ranks * len(steps) + n_phases > max_slices - kept_waits:
        step_every = math.ceil(len(steps) / per_rank) if per_rank > 0 else len(steps) + 1
    return SlicePlan(
        ranks,
        len(steps),
        n_waits,
        max_slices,
        step_every=step_every,
        barrier_every=barrier_every,
        kept_steps=frozenset(steps[::step_every]) if step_every > 1 else None,
        kept_barriers=frozenset(barriers[::barrier_every]) if barrier_every > 1 else None,
        phases=n_phases,
    )


def _slices(
    report: Report,
    pids: dict[str, int],
    span: tuple[float, float],
    plan: SlicePlan,
    out: TraceEventWriter,
) -> tuple[int, int]:
    """Each rank's slices and instants, one rank file at a time."""
    hostnames = {n.hostname: name for name, n in report.data.manifest.nodes.items()}
    loss = {m.step: m.loss for m in report.data.metrics if math.isfinite(m.loss)}
    offsets = report.timeline.offsets_s
    written = instants = 0
    named: set[int] = set()
    for ranked in rank_slices(report.data.marker_files, offsets, hostnames):
        if ranked.node not in pids:  # markers from a node the manifest lacks
            pids[ranked.node] = PID_BASE + len(pids)
            out.process(pids[ranked.node], ranked.node, len(pids) - 1)
        pid, tid = pids[ranked.node], TID_BASE + ranked.rank
        if ranked.rank not in named:
            out.thread(pid, tid, f"rank {ranked.rank}", ranked.rank)
            named.add(ranked.rank)
        written += _rank_slices(out, pid, tid, ranked, span, plan, loss)
        written += _phase_slices(out, pid, tid, ranked, span, plan)
        instants += _mark_instants(out, pid, tid, ranked, span, plan)
    return written, instants


def _rank_slices(
    out: TraceEventWriter,
    pid: int,
    tid: int,
    ranked: RankSlices,
    span: tuple[float, float],
    plan: SlicePlan,
    loss: dict[int, float],
) -> int:
    lo, hi = span
    keep = (ranked.begin_s <= hi) & (ranked.end_s >= lo)
    if plan.kept_steps is not None:
        keep &= np.isin(ranked.step, list(plan.kept_steps))
    written = 0
    for step, begin_s, end_s, tokens in zip(
        ranked.step[keep].tolist(),
        ranked.begin_s[keep].tolist(),
        ranked.end_s[keep].tolist(),
        ranked.tokens[keep].tolist(),
        strict=True,
    ):
        args = f'"step":{step}'
        if tokens != NO_TOKENS:
            args += f',"tokens":{tokens}'
        if step in loss:
            args += f',"loss":{number(loss[step])}'
        out.complete(pid, tid, "step", f"step {step}", to_us(begin_s), to_us(end_s), f"{{{args}}}")
        written += 1
    keep = (ranked.enter_s <= hi) & (ranked.exit_s >= lo)
    if plan.kept_barriers is not None:
        keep &= np.isin(ranked.barrier, list(plan.kept_barriers))
    step_end = dict(zip(ranked.step.tolist(), ranked.end_s.tolist(), strict=True))
    for step, enter_s, exit_s in zip(
        ranked.barrier[keep].tolist(),
        ranked.enter_s[keep].tolist(),
        ranked.exit_s[keep].tolist(),
        strict=True,
    ):
        args = f'{{"step":{step},"wait_s":{number(exit_s - enter_s)}}}'
        # A wait measured from a hair before its step's end (another clock) would not
        # nest with the step's slice on the rank's track: it starts at the step's end.
        end_s = step_end.get(step)
        if end_s is not None and enter_s < end_s <= exit_s:
            enter_s = end_s
        name = f"barrier {step} wait"
        out.complete(pid, tid, "barrier", name, to_us(enter_s), to_us(exit_s), args)
        written += 1
    return written


def _phase_slices(
    out: TraceEventWriter,
    pid: int,
    tid: int,
    ranked: RankSlices,
    span: tuple[float, float],
    plan: SlicePlan,
) -> int:
    """A rank's phases, each cut to its step's span (a slice must nest in the step's)."""
    begin_s, end_s, step = ranked.phase_begin_s, ranked.phase_end_s, ranked.phase_step
    if ranked.step.size:  # its steps, ascending
        at = np.clip(np.searchsorted(ranked.step, step), 0, ranked.step.size - 1)
        in_step = ranked.step[at] == step
        begin_s = np.where(in_step, np.maximum(begin_s, ranked.begin_s[at]), begin_s)
        end_s = np.where(in_step, np.minimum(end_s, ranked.end_s[at]), end_s)
    keep = (begin_s <= span[1]) & (end_s >= span[0]) & (end_s >= begin_s)
    if plan.kept_steps is not None:
        keep &= np.isin(step, list(plan.kept_steps))
    names = ranked.names
    for name, s, b, e in zip(
        ranked.phase[keep].tolist(),
        step[keep].tolist(),
        begin_s[keep].tolist(),
        end_s[keep].tolist(),
        strict=True,
    ):
        args = f'{{"step":{s}}}' if s >= 0 else "{}"
        out.complete(pid, tid, "phase", names[name], to_us(b), to_us(e), args)
    return int(keep.sum())


def _mark_instants(
    out: TraceEventWriter,
    pid: int,
    tid: int,
    ranked: RankSlices,
    span: tuple[float, float],
    plan: SlicePlan,
) -> int:
    """A rank's own events (``mark``) as instants on its track."""
    keep = (ranked.mark_s >= span[0]) & (ranked.mark_s <= span[1])
    if plan.kept_steps is not None:
        keep &= np.isin(ranked.mark_step, list(plan.kept_steps))
    for name, s, t in zip(
        ranked.mark[keep].tolist(),
        ranked.mark_step[keep].tolist(),
        ranked.mark_s[keep].tolist(),
        strict=True,
    ):
        args = f'{{"step":{s}}}' if s >= 0 else "{}"
        out.instant(pid, tid, "mark", ranked.names[name], to_us(t), args)
    return int(keep.sum())


def _other_data(
    report: Report, span: tuple[float, float], plan: SlicePlan, window: TraceWindow | None
) -> dict[str, str]:
    start = report.window.start_s
    if window is None:
        buckets = next(
            (d.view.buckets for n in report.nodes.values() for d in n.devices.values() if d.view),
            None,
        )
        counters = (
            f"means over buckets of {buckets.width_s:.3f} s ({buckets.count} per device); "
            "a point equal to the one before is left out"
            if buckets is not None
            else "none"
        )
    else:
        counters = "every sample in the span"
    return {
        "generator": "rtk report",
        "run": report.run_dir.name,
        "timestamps": (
            f"microseconds since the Unix epoch on head node {report.timeline.head}'s wall "
            "clock: every node's times minus its clock offset"
        ),
        "clock_offsets_s": json.dumps(report.timeline.offsets_s),
        "run_start_us": str(to_us(start)),
        "span": (
            f"{span[0] - start:.3f} s to {span[1] - start:.3f} s since the run's start "
            f"({span[0] - start:.3f}:{span[1] - start:.3f})"
        ),
        "counters": counters,
        "slices": plan.describe(),
    }


def _nth(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


__all__ = [
    "DEFAULT_MAX_SLICES",
    "TRACE_FILE",
    "SlicePlan",
    "TraceExport",
    "TraceWindow",
    "plan_slices",
    "write_trace",
]
