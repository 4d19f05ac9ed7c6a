"""Check a GPU's energy counter against its integrated power, window by window.

The counter is what the report trusts for totals (DESIGN.md section 8: the instant
power sensor sees only part of each 100 ms window on A100/H100); integrating the power
samples over the same windows shows how far the trace can be trusted for shapes.
Windows are the intervals between consecutive barriers (merged until long enough to
hold several samples), or 10 s windows when the run has fewer than two barriers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolkit.telemetry.report.figures.energy import MODELLED, NodeReport
from toolkit.telemetry.report.inputs.timeline import Barrier, Window

TOLERANCE = 0.15
FIXED_WINDOW_S = 10.0
# A window must be measured over this share of its length by both sources.
MIN_COVERED = 0.99


@dataclass(frozen=True)
class CheckWindow:
    """One window's two energy figures (head-timeline times).

    Attributes:
        start_s: Window start.
        end_s: Window end.
        counter_j: The counter's delta.
        power_j: The trapezoid integral of the power samples.
    """

    start_s: float
    end_s: float
    counter_j: float
    power_j: float

    @property
    def ratio(self) -> float | None:
        """Integrated power over counter delta."""
        return self.power_j / self.counter_j if self.counter_j > 0 else None

    @property
    def flagged(self) -> bool:
        """Whether the two differ by more than ``TOLERANCE``."""
        if self.counter_j <= 0:
            return self.power_j > 0
        return abs(self.power_j / self.counter_j - 1.0) > TOLERANCE


@dataclass(frozen=True)
class CrossCheck:
    """Counter against integrated power for one device.

    Attributes:
        node: The device's node.
        device: The GPU UUID.
        basis: ``barriers`` or ``10 s windows``.
        windows: The windows both sources measured completely.
        skipped: Windows left out because a gap touched them.
    """

    node: str
    device: str
    basis: str
    windows: list[CheckWindow]
    skipped: int

    @property
    def counter_j(self) -> float:
        """The counter's energy over the compared windows."""
        return sum(w.counter_j for w in self.windows)

    @property
    def power_j(self) -> float:
        """The integrated power over the compared windows."""
        return sum(w.power_j for w in self.windows)

    @property
    def ratio(self) -> float | None:
        """Integrated power over counter, all compared windows together."""
        return self.power_j / self.counter_j if self.counter_j > 0 else None

    @property
    def flagged(self) -> list[CheckWindow]:
        """The windows where the two differ by more than ``TOLERANCE``."""
        return [w for w in self.windows if w.flagged]


def check_windows(
    window: Window, barriers: list[Barrier], min_length_s: float
) -> tuple[str, list[tuple[float, float]]]:
    """The comparison windows: between barriers, else fixed 10 s windows."""
    times = [b.t_s for b in barriers if window.start_s <= b.t_s <= window.end_s]
    if len(times) >= 2:
        basis, edges = "barriers", times
    else:
        basis = f"{FIXED_WINDOW_S:g} s windows"
        edges = [*np.arange(window.start_s, window.end_s, FIXED_WINDOW_S), window.end_s]
    merged = [float(edges[0])]
    for edge in edges[1:]:
        if edge - merged[-1] >= min_length_s:
            merged.append(float(edge))
    if basis != "barriers" and len(merged) > 1 and merged[-1] < window.end_s:
        merged[-1] = window.end_s  # a short tail joins the last window
    return basis, list(zip(merged[:-1], merged[1:], strict=True))


def cross_checks(
    nodes: dict[str, NodeReport],
    window: Window,
    barriers: list[Barrier],
    rate_hz: float,
    spans: tuple[str, list[tuple[float, float]]] | None = None,
) -> tuple[list[CrossCheck], list[str]]:
    """A cross-check for every GPU with both a counter and power samples; and notes.

    ``spans`` are the windows as ``check_windows`` gives them (computed when None).
    """
    basis, edges = spans or check_windows(window, barriers, max(10.0 / rate_hz, 1.0))
    start = np.array([a for a, _ in edges], dtype=np.float64)
    end = np.array([b for _, b in edges], dtype=np.float64)
    checks: list[CrossCheck] = []
    notes: list[str] = []
    for node in nodes.values():
        for device in node.devices.values():
            if device.counter is None or device.power is None or device.energy_source == MODELLED:
                continue  # the CPU model's energy is its power's integral: nothing to check
            if device.kind == "host":
                notes.append(
                    f"{node.name}/host: RAPL energy (CPU package and DRAM) and the "
                    f"{device.power_source or 'host'} power reading measure different "
                    "things; not cross-checked"
                )
                continue
            length_s = end - start
            both = (device.counter.covered_s(start, end) >= MIN_COVERED * length_s) & (
                device.power.covered_s(start, end) >= MIN_COVERED * length_s
            )
            counter_j = device.counter.energy_j(start, end)
            power_j = device.power.energy_j(start, end)
            compared = [
                CheckWindow(float(start[i]), float(end[i]), float(counter_j[i]), float(power_j[i]))
                for i in np.flatnonzero(both)
            ]
            checks.append(
                CrossCheck(node.name, device.device, basis, compared, len(edges) - len(compared))
            )
    return checks, notes
