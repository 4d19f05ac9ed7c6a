"""What the power controllers are fed and what they answer: pure, typed, no NVML.

The job driver (``toolkit.power.driver``) measures the run in windows of a few steps
each, every GPU at one power limit for the whole window, and hands each window to a
controller (``optimize``, ``stragglers``); the controller answers the limits for the
next window. Nothing here reads a clock or a GPU: the same windows give the same
decisions, so tests replay a run against a model of a GPU.

A GPU is named by its node and its NVML index on that node (``GpuKey``); its limits'
range by ``GpuRange`` (NVML's constraints and default limit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, order=True)
class GpuKey:
    """One GPU of the run.

    Attributes:
        node: The node's inventory name.
        index: The GPU's NVML index on that node.
    """

    node: str
    index: int

    def __str__(self) -> str:
        return f"{self.node}/gpu{self.index}"


@dataclass(frozen=True)
class GpuRange:
    """The power limits one GPU takes, in watts (NVML's constraints).

    Attributes:
        min_w: The least limit it accepts.
        max_w: The most it accepts.
        default_w: Its default limit (where it started, and what it goes back to).
    """

    min_w: float
    max_w: float
    default_w: float

    def clamp(self, limit_w: float) -> float:
        """``limit_w`` within this GPU's range."""
        return min(self.max_w, max(self.min_w, limit_w))


@dataclass(frozen=True)
class Window:
    """What the run did over a few consecutive steps, each GPU at one limit throughout.

    Attributes:
        limits_w: Each GPU's power limit during the window.
        steps: Steps finished in the window (at least 1).
        step_s: Wall seconds per step over the window (mean).
        energy_j: Each GPU's energy over the window, from its energy counter.
        wait_s: Each GPU's mean seconds per step spent waiting at the step's collective
            or barrier for the last rank (stragglers); empty when not measured.
    """

    limits_w: Mapping[GpuKey, float]
    steps: int
    step_s: float
    energy_j: Mapping[GpuKey, float]
    wait_s: Mapping[GpuKey, float] = field(default_factory=dict)

    @property
    def energy_per_step_j(self) -> float:
        """Every GPU's energy per step, summed."""
        return sum(self.energy_j.values()) / max(1, self.steps)


@dataclass(frozen=True)
class Decision:
    """A controller's answer: the limits for the next window, and why.

    Attributes:
        limits_w: Each GPU's limit for the next window (every GPU of the run).
        reason: The decision in one line, for the run's log and its record.
        steps: How many steps the next window should last.
        settled: True once the controller keeps these limits (optimize's choice made;
            stragglers' adjustments go on being watched but are not a profile).
    """

    limits_w: Mapping[GpuKey, float]
    reason: str
    steps: int
    settled: bool = False


class Controller(Protocol):
    """A power policy's brain: fed windows, it answers the limits for the next one.

    Pure: it reads no clock and no GPU. Replaying the windows a run recorded into a new
    controller brings it to the same state (a restarted driver resumes, not repeats).
    """

    def start(self) -> Decision:
        """The limits and length of the first window (the warm-up)."""
        ...

    def observe(self, window: Window) -> Decision:
        """The window just measured -> the limits and length of the next one."""
        ...
