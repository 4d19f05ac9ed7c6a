"""Put the markers on the head's timeline, and find the run's window.

A node time ``t`` maps to the head's timeline as ``t - offset_s`` (the node's offset
in the manifest). Times here are head wall-clock seconds; reports show them relative
to the window's start.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolkit.telemetry.report.load import RunData
from toolkit.telemetry.report.series import FloatArray

__all__ = ["Barrier", "FloatArray", "StepSpan", "Timeline", "Window", "align"]


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
class Timeline:
    """Markers on one timeline, and the window.

    Attributes:
        head: The node whose clock is the timeline.
        offsets_s: Node -> the offset subtracted from its times.
        window: The span the report covers.
        steps: The reference rank's completed steps, latest attempt, by step number.
        step_rank: The reference rank (0, or the lowest rank with markers).
        barriers: Barrier exits, in time order.
        ranks: How many ranks wrote markers.
        restarts: Resumed attempts (``run_start`` after the first, most on any rank).
        marker_tokens: Tokens over all ranks' ``step_end`` records, when they carry them.
        notes: What could not be aligned as documented.
    """

    head: str
    offsets_s: dict[str, float]
    window: Window
    steps: list[StepSpan]
    step_rank: int | None
    barriers: list[Barrier]
    ranks: int
    restarts: int
    marker_tokens: int | None
    notes: list[str] = field(default_factory=list)


def align(data: RunData) -> Timeline:
    """Map the markers onto the head's timeline and find the window."""
    notes: list[str] = []
    offsets = {name: node.offset_s for name, node in data.manifest.nodes.items()}
    records = _aligned_markers(data, offsets, notes)
    per_rank = {rank: _latest_attempt(recs) for rank, recs in sorted(records.items())}
    window = _marker_window(per_rank) or _sample_window(data)
    step_rank = 0 if 0 in per_rank else min(per_rank, default=None)
    if step_rank not in (0, None):
        notes.append(f"no markers from rank 0; steps are rank {step_rank}'s")
    return Timeline(
        head=data.manifest.head,
        offsets_s=offsets,
        window=window,
        steps=_steps(per_rank.get(step_rank, {})) if step_rank is not None else [],
        step_rank=step_rank,
        barriers=_barriers(per_rank),
        ranks=len(per_rank),
        restarts=max((_restarts(recs) for recs in records.values()), default=0),
        marker_tokens=_marker_tokens(per_rank),
        notes=notes,
    )


def _aligned_markers(
    data: RunData, offsets: dict[str, float], notes: list[str]
) -> dict[int, list[dict[str, Any]]]:
    """Rank -> its usable records in file order, each with ``t_s`` on the head timeline."""
    by_host = {n.hostname: name for name, n in data.manifest.nodes.items()}
    unknown: set[str] = set()
    records: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for record in data.markers:
        wall_s, rank = record.get("wall_s"), record.get("rank")
        if not isinstance(wall_s, int | float) or not isinstance(rank, int):
            continue
        who = str(record.get("node") or "")
        node = (
            who if who in offsets else by_host.get(who) or by_host.get(str(record.get("hostname")))
        )
        if node is None:
            unknown.add(who)
        records[rank].append({**record, "t_s": float(wall_s) - offsets.get(node or "", 0.0)})
    if unknown:
        notes.append(
            f"markers from nodes not in the manifest ({', '.join(sorted(unknown))}): "
            "clock offset 0 s assumed"
        )
    return records


def _latest_attempt(records: list[dict[str, Any]]) -> dict[tuple[str, int | None], dict[str, Any]]:
    """(event, step) -> the latest record, after dropping what a restart superseded.

    A ``run_start`` after the first resumes from a checkpoint at its ``step``: records
    of the failed attempt for later steps are superseded (those steps run again).
    The first attempt's ``run_start`` stays: the run's window begins there.
    """
    kept: list[dict[str, Any]] = []
    for record in records:
        if record.get("event") == "run_start" and kept:
            resumed_at = record.get("step") or 0
            kept = [r for r in kept if r.get("event") == "run_start" or _step(r) <= resumed_at]
        kept.append(record)
    latest: dict[tuple[str, int | None], dict[str, Any]] = {}
    for record in kept:
        step = record.get("step")
        key = (str(record.get("event")), step if isinstance(step, int) else None)
        if key[0] == "run_start" and key in latest:
            continue  # the window starts with the first attempt
        latest[key] = record
    return latest


def _step(record: dict[str, Any]) -> int:
    step = record.get("step")
    return step if isinstance(step, int) else -1


def _restarts(records: list[dict[str, Any]]) -> int:
    return max(len([r for r in records if r.get("event") == "run_start"]) - 1, 0)


def _marker_window(
    per_rank: dict[int, dict[tuple[str, int | None], dict[str, Any]]],
) -> Window | None:
    starts = _times(per_rank, ("run_start", "step_begin"))
    ends = _times(per_rank, ("step_end", "run_end"))
    if not starts or not ends or max(ends) <= min(starts):
        return None
    return Window(min(starts), max(ends), "markers")


def _times(
    per_rank: dict[int, dict[tuple[str, int | None], dict[str, Any]]], events: tuple[str, ...]
) -> list[float]:
    return [
        float(record["t_s"])
        for records in per_rank.values()
        for (event, _), record in records.items()
        if event in events
    ]


def _sample_window(data: RunData) -> Window:
    spans = [s for s in data.spans.values() if s.samples and s.first_s is not None]
    start = min(float(s.first_s) for s in spans if s.first_s is not None)
    end = max(float(s.last_s) for s in spans if s.last_s is not None)
    return Window(start, max(end, start + 1e-9), "samples")


def _steps(records: dict[tuple[str, int | None], dict[str, Any]]) -> list[StepSpan]:
    spans = []
    for (event, step), end in records.items():
        begin = records.get(("step_begin", step))
        if event == "step_end" and step is not None and begin is not None:
            spans.append(StepSpan(step, begin["t_s"], end["t_s"]))
    return sorted(spans, key=lambda s: s.step)


def _barriers(per_rank: dict[int, dict[tuple[str, int | None], dict[str, Any]]]) -> list[Barrier]:
    times: dict[int, list[float]] = defaultdict(list)
    for recs in per_rank.values():
        for (event, step), record in recs.items():
            if event == "barrier" and step is not None:
                times[step].append(record["t_s"])
    barriers = [
        Barrier(step, float(np.median(ts)), max(ts) - min(ts), len(ts))
        for step, ts in times.items()
    ]
    return sorted(barriers, key=lambda b: b.t_s)


def _marker_tokens(per_rank: dict[int, dict[tuple[str, int | None], dict[str, Any]]]) -> int | None:
    tokens = [
        int(record["tokens"])
        for records in per_rank.values()
        for (event, _), record in records.items()
        if event == "step_end" and isinstance(record.get("tokens"), int)
    ]
    return sum(tokens) if tokens else None
