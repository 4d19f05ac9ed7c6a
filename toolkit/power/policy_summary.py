"""What a run's power policy did, in figures and a line or two (pure, from ``power.jsonl``).

The report (terminal, ``summary.json``, HTML) shows it: the limits tried and their time
and energy per step (optimize's curve), the choice, and the energy and time saved
against the first steps at the default limits (the warm-up window). After a restart
the windows of every driver count, in order.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.power.records import PowerLog, WindowRecord
from toolkit.power.settings import OPTIMIZE


@dataclass(frozen=True)
class PowerPoint:
    """One window as the curve shows it.

    Attributes:
        first_step: Its first step.
        steps: Its steps.
        mean_limit_w: The GPUs' mean limit in it.
        step_s: Its time per step.
        energy_per_step_j: Its energy per step, every GPU summed.
        settled: True once the policy had settled (the kept limits).
    """

    first_step: int
    steps: int
    mean_limit_w: float
    step_s: float
    energy_per_step_j: float
    settled: bool


@dataclass(frozen=True)
class PowerSummary:
    """The power policy's outcome.

    Attributes:
        policy: ``optimize`` or ``stragglers``.
        gpus: GPUs it set.
        points: Every window, in order.
        baseline: The first window (the warm-up, at the default limits); None: none.
        kept: The settled windows' totals as one point (time-weighted); None: not settled.
        last_reason: The last decision's reason.
        chosen_w: The mean limit of the first settled decision (optimize's choice), also
            when the run ended before a window at it was measured; None: none settled.
        notes: What else it said (a limit it could not set, the put-back).
    """

    policy: str
    gpus: int
    points: tuple[PowerPoint, ...]
    baseline: PowerPoint | None
    kept: PowerPoint | None
    last_reason: str | None
    notes: tuple[str, ...]
    chosen_w: float | None = None

    @property
    def energy_saved(self) -> float | None:
        """The share of energy per step saved by the kept limits against the baseline."""
        if self.baseline is None or self.kept is None or self.baseline.energy_per_step_j <= 0:
            return None
        return 1.0 - self.kept.energy_per_step_j / self.baseline.energy_per_step_j

    @property
    def slowdown(self) -> float | None:
        """How much longer a step took with the kept limits than at the baseline."""
        if self.baseline is None or self.kept is None or self.baseline.step_s <= 0:
            return None
        return self.kept.step_s / self.baseline.step_s - 1.0

    def lines(self) -> list[str]:
        """The outcome in one or two lines."""
        head = f"power policy {self.policy} on {self.gpus} GPU(s)"
        if self.baseline is None:
            return [f"{head}: no window measured"] + list(self.notes[-1:])
        base = self.baseline
        if self.kept is None and self.chosen_w is not None:
            return [
                f"{head}: kept {self.chosen_w:.0f} W (mean) after {len(self.points)} "
                "window(s); the run ended before a window at it was measured"
            ]
        if self.kept is None:
            tail = self.last_reason or "still measuring"
            return [f"{head}: not settled ({len(self.points)} window(s)): {tail}"]
        saved, slower = self.energy_saved, self.slowdown
        figures = (
            f"{saved:.1%} less energy per step, {slower:+.1%} time per step"
            if saved is not None and slower is not None
            else "no comparison"
        )
        return [
            f"{head}: kept {self.kept.mean_limit_w:.0f} W (mean) after {len(self.points)} "
            f"window(s); {figures} against the first {base.steps} steps at "
            f"{base.mean_limit_w:.0f} W",
            f"  {base.energy_per_step_j:.1f} -> {self.kept.energy_per_step_j:.1f} J/step, "
            f"{base.step_s:.3f} -> {self.kept.step_s:.3f} s/step",
        ]


def _point(record: WindowRecord, settled: bool) -> PowerPoint:
    return PowerPoint(
        record.first_step,
        record.window.steps,
        record.mean_limit_w,
        record.window.step_s,
        record.energy_per_step_j,
        settled,
    )


def summarize(log: PowerLog) -> PowerSummary:
    """The outcome of the policy ``log`` records.

    A window is settled when the decision made before it was (the decisions are one
    more than the windows: the first is the warm-up's).
    """
    decisions = log.decisions
    points = tuple(
        _point(w, i < len(decisions) and decisions[i].settled) for i, w in enumerate(log.windows)
    )
    kept_points = [p for p in points if p.settled]
    if log.policy != OPTIMIZE and not kept_points and len(points) > 1:
        kept_points = list(points[-1:])  # stragglers: the limits it ended with
    chosen = next((d for d in decisions if d.settled), None)
    chosen_w = (
        sum(chosen.limits_w.values()) / len(chosen.limits_w) if chosen and chosen.limits_w else None
    )
    kept = None
    if kept_points:
        steps = sum(p.steps for p in kept_points)
        time_s = sum(p.step_s * p.steps for p in kept_points)
        energy_j = sum(p.energy_per_step_j * p.steps for p in kept_points)
        kept = PowerPoint(
            kept_points[0].first_step,
            steps,
            sum(p.mean_limit_w * p.steps for p in kept_points) / steps,
            time_s / steps,
            energy_j / steps,
            True,
        )
    return PowerSummary(
        policy=log.policy,
        gpus=len(log.gpus),
        points=points,
        baseline=points[0] if points else None,
        kept=kept,
        last_reason=decisions[-1].reason if decisions else None,
        notes=tuple(log.notes),
        chosen_w=chosen_w,
    )
