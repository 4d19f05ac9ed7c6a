"""Put the markers on the head's timeline, and find the run's window.

A node time ``t`` maps to the head's timeline as ``t - offset_s`` (the node's offset
in the manifest). Times here are head wall-clock seconds; reports show them relative
to the window's start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toolkit.telemetry.report.inputs.load import RunData
from toolkit.telemetry.report.inputs.marker_summary import (
    Barrier,
    MarkerSummary,
    Phases,
    StepsFrom,
    StepSpan,
    Waits,
    reduce_markers,
)
from toolkit.telemetry.report.inputs.series import FloatArray

__all__ = [
    "Barrier",
    "FloatArray",
    "Phases",
    "StepSpan",
    "StepsFrom",
    "Timeline",
    "Waits",
    "Window",
    "align",
]


@dataclass(frozen=True)
class Window:
    """The span a report covers, in head-timeline seconds.

    Attributes:
        start_s: The earliest run_start/step_begin (or the first sample, without markers).
        end_s: The last step_end/run_end (or the last sample).
        basis: ``markers`` or ``samples``: what the window was taken from.
    """

    start_s: float
    end_s: float
    basis: str

    @property
    def duration_s(self) -> float:
        """The window's length."""
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Timeline:
    """Markers on one timeline, and the window.

    Attributes:
        head: The node whose clock is the timeline.
        offsets_s: Node -> the offset subtracted from its times.
        window: The span the report covers.
        steps: The reference rank's completed steps, latest attempt, by step number.
        step_rank: The reference rank (0, or the lowest rank with markers).
        barriers: Barrier exits, in time order.
        waits: Every rank's wait at every barrier, or at the collective of a step without
            barriers (from backward phases): entry and exit times.
        ranks: How many ranks wrote markers.
        restarts: Resumed attempts (``run_start`` after the first, most on any rank).
        marker_tokens: Tokens over all ranks' ``step_end`` records, when they carry them.
        notes: What could not be aligned as documented.
        phases: Every rank's phases (``phase_begin``/``phase_end``); None without any.
        marks: The user's own events (``mark``): name -> records over every rank.
        steps_from: How the steps were found (run_start's ``steps_from``); None when
            no rank says.
    """

    head: str
    offsets_s: dict[str, float]
    window: Window
    steps: list[StepSpan]
    step_rank: int | None
    barriers: list[Barrier]
    waits: Waits | None
    ranks: int
    restarts: int
    marker_tokens: int | None
    notes: list[str] = field(default_factory=list)
    phases: Phases | None = None
    marks: dict[str, int] = field(default_factory=dict)
    steps_from: StepsFrom | None = None


def align(data: RunData) -> Timeline:
    """Map the markers onto the head's timeline and find the window."""
    notes: list[str] = []
    offsets = {name: node.offset_s for name, node in data.manifest.nodes.items()}
    hostnames = {n.hostname: name for name, n in data.manifest.nodes.items()}
    markers = reduce_markers(data.marker_files, offsets, hostnames)
    if markers.unknown_nodes:
        notes.append(
            f"markers from nodes not in the manifest ({', '.join(sorted(markers.unknown_nodes))}): "
            "clock offset 0 s assumed"
        )
    window = _marker_window(markers) or _sample_window(data)
    window = _through_stalls(data.stalls_declared_s, window, notes)
    if markers.step_rank not in (0, None):
        notes.append(f"no markers from rank 0; steps are rank {markers.step_rank}'s")
    return Timeline(
        head=data.manifest.head,
        offsets_s=offsets,
        window=window,
        steps=markers.steps,
        step_rank=markers.step_rank,
        barriers=markers.barriers,
        waits=markers.waits,
        ranks=markers.ranks,
        restarts=markers.restarts,
        marker_tokens=markers.tokens,
        notes=notes,
        phases=markers.phases,
        marks=markers.marks,
        steps_from=markers.steps_from,
    )


def _marker_window(markers: MarkerSummary) -> Window | None:
    start, end = markers.start_s, markers.end_s
    if start is None or end is None or end <= start:
        return None
    return Window(start, end, "markers")


def _through_stalls(declared_s: list[float], window: Window, notes: list[str]) -> Window:
    """The window to the last stall's declaration, when the run hung past its last step.

    A run the watchdog stopped (``--on-stall abort``) ends at its last completed step in
    the markers, but its GPUs went on through the hang until the stall was declared:
    that time is the run's too (its energy, its length). A run that went on after a
    stall has later steps, which already reach past it.
    """
    hung_to = max(declared_s, default=None)
    if window.basis != "markers" or hung_to is None or hung_to <= window.end_s:
        return window
    notes.append(
        f"the run hung {hung_to - window.end_s:.1f} s after its last step, until the "
        "stall was declared: the window runs to that moment"
    )
    return Window(window.start_s, hung_to, window.basis)


def _sample_window(data: RunData) -> Window:
    spans = [s for s in data.spans.values() if s.samples and s.first_s is not None]
    start = min(float(s.first_s) for s in spans if s.first_s is not None)
    end = max(float(s.last_s) for s in spans if s.last_s is not None)
    return Window(start, max(end, start + 1e-9), "samples")
