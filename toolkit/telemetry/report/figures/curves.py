"""Energy as a function of time, from an energy counter or from power samples, and gaps.

An ``EnergyCurve`` answers "how many joules between a and b, and how much of [a, b]
was measured" for many intervals at once. Between two samples it is linear in the
counter, or the trapezoid of the power. Over a gap (two samples further apart than
the gap threshold) the power curve adds nothing: energy there is not invented. A
counter bridges gaps (it kept counting while nobody read it), so its delta over a
whole gap is a measurement, but how that energy was spread inside the gap is not:
bridged time counts as spanned, not as covered, and an interval that cuts into it is
not measured completely. A counter says nothing before its first or after its last
reading.

A counter read more slowly than the power (the sampler reads GPU energy at 1 Hz by
default, power at 10-50 Hz) is shaped by the power samples: inside each interval
between two counter readings, the counter's delta is spread in proportion to the
integrated power (``from_counter(..., shape=power)``), so an interval shorter than the
counter's, such as a 300 ms step, gets its share of the measured joules as the power
saw it, and every interval between counter readings keeps the counter's exact delta.
Where the power does not cover a counter interval completely, that interval stays
linear. A counter interval is covered when it is no longer than its own gap threshold
(three of its median intervals, at least the samples' threshold) and no gap in the
device's samples cuts into it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from toolkit.telemetry.report.inputs.timeline import FloatArray, Window

BoolArray = npt.NDArray[np.bool_]


def gap_threshold_s(rate_hz: float) -> float:
    """Two consecutive samples further apart than this leave a gap between them."""
    return max(3.0 / rate_hz, 1.0)


@dataclass(frozen=True)
class Gap:
    """An interval of the window with no samples.

    Attributes:
        start_s: Head-timeline start.
        end_s: Head-timeline end.
        where: ``leading`` (before the first sample), ``inner``, ``trailing`` (after
            the last sample: the sampler stopped early) or ``no samples``.
    """

    start_s: float
    end_s: float
    where: str

    @property
    def duration_s(self) -> float:
        """The gap's length."""
        return self.end_s - self.start_s


def find_gaps(t_s: FloatArray, window: Window, max_interval_s: float) -> list[Gap]:
    """Gaps of the sorted sample times ``t_s`` within ``window``."""
    start, end = window.start_s, window.end_s
    if t_s.size == 0:
        return [Gap(start, end, "no samples")]
    gaps: list[Gap] = []
    if t_s[0] - start > max_interval_s:
        gaps.append(Gap(start, min(float(t_s[0]), end), "leading"))
    for i in np.flatnonzero(np.diff(t_s) > max_interval_s):
        lo, hi = max(float(t_s[i]), start), min(float(t_s[i + 1]), end)
        if hi > lo:
            gaps.append(Gap(lo, hi, "inner"))
    if end - t_s[-1] > max_interval_s and t_s[0] <= end:
        gaps.append(Gap(max(float(t_s[-1]), start), end, "trailing"))
    return gaps


class EnergyCurve:
    """Cumulative energy and measured time at any moment, from sorted samples.

    Each segment between consecutive samples carries the power at its ends (linear in
    between), whether it counts (a segment that does not adds neither energy nor time)
    and whether it is fine (no longer than the gap threshold: covered, not bridged).
    """

    def __init__(
        self,
        t_s: FloatArray,
        start_w: FloatArray,
        end_w: FloatArray,
        counts: FloatArray,
        fine: FloatArray,
    ) -> None:
        self.t_s = t_s
        self._start_w = start_w
        self._end_w = end_w
        self._counts = counts
        length_s = np.diff(t_s)
        self._cum_j = np.concatenate([[0.0], np.cumsum(counts * length_s * (start_w + end_w) / 2)])
        self._cum_span_s = np.concatenate([[0.0], np.cumsum(counts * length_s)])
        self._fine = counts * fine
        self._cum_s = np.concatenate([[0.0], np.cumsum(self._fine * length_s)])
        # A counter shaped by power: (the power, each interval's scale, whether it is
        # shaped, the power's cumulative energy at each interval's start).
        self._shape: tuple[EnergyCurve, FloatArray, BoolArray, FloatArray] | None = None

    @classmethod
    def from_power(cls, t_s: FloatArray, power_w: FloatArray, max_interval_s: float) -> EnergyCurve:
        """The trapezoid integral of power samples, with nothing over gaps."""
        t_s, power_w = _distinct_times(t_s, power_w)
        counts = (np.diff(t_s) <= max_interval_s).astype(np.float64)
        return cls(t_s, power_w[:-1], power_w[1:], counts, counts)

    @classmethod
    def from_counter(
        cls,
        t_s: FloatArray,
        energy_j: FloatArray,
        max_interval_s: float,
        *,
        shape: EnergyCurve | None = None,
        gaps: Sequence[Gap] = (),
    ) -> tuple[EnergyCurve, int]:
        """The counter between readings; also how many resets were bridged.

        A reading below the previous one means the counter restarted from zero (driver
        reload, sampler restart): the energy of that segment is taken as the new reading.

        Args:
            t_s: Reading times, sorted.
            energy_j: The counter at each.
            max_interval_s: Longest counter interval that counts as covered.
            shape: Power of the same device: each counter interval it covers completely
                is spread in proportion to it (else linear).
            gaps: Gaps in the device's samples: a counter interval one cuts into is
                not covered.
        """
        t_s, energy_j = _distinct_times(t_s, energy_j)
        delta_j = np.diff(energy_j)
        resets = delta_j < 0
        delta_j = np.where(resets, energy_j[1:], delta_j)
        length_s = np.diff(t_s)
        fine = (length_s <= max_interval_s).astype(np.float64)
        for gap in gaps:
            fine[(t_s[:-1] < gap.end_s) & (t_s[1:] > gap.start_s)] = 0.0
        power_w = delta_j / length_s if length_s.size else length_s
        ones = np.ones_like(power_w)
        if shape is None or shape.empty or length_s.size == 0:
            return cls(t_s, power_w, power_w, ones, fine), int(resets.sum())
        return _shaped(t_s, delta_j, fine, shape), int(resets.sum())

    @property
    def empty(self) -> bool:
        """Whether the curve has no segment at all."""
        return self.t_s.size < 2

    def energy_j(self, start_s: FloatArray | float, end_s: FloatArray | float) -> FloatArray:
        """Joules measured between ``start_s`` and ``end_s`` (element-wise)."""
        return self._cumulative(np.asarray(end_s), "energy") - self._cumulative(
            np.asarray(start_s), "energy"
        )

    def covered_s(self, start_s: FloatArray | float, end_s: FloatArray | float) -> FloatArray:
        """Seconds of ``[start_s, end_s]`` measured at the sample rate (element-wise)."""
        return self._cumulative(np.asarray(end_s), "covered") - self._cumulative(
            np.asarray(start_s), "covered"
        )

    def spanned_s(self, start_s: FloatArray | float, end_s: FloatArray | float) -> FloatArray:
        """Seconds of ``[start_s, end_s]`` that ``energy_j`` accounts for, bridges included."""
        return self._cumulative(np.asarray(end_s), "spanned") - self._cumulative(
            np.asarray(start_s), "spanned"
        )

    def _cumulative(self, t: FloatArray, what: str) -> FloatArray:
        t = np.atleast_1d(t).astype(np.float64)
        if self.empty:
            return np.zeros_like(t)
        last = self.t_s.size - 2
        i = np.clip(np.searchsorted(self.t_s, t, side="right") - 1, 0, last)
        into_s = np.clip(t - self.t_s[i], 0.0, self.t_s[i + 1] - self.t_s[i])
        if what == "energy":
            length_s = self.t_s[i + 1] - self.t_s[i]
            at_w = self._start_w[i] + (self._end_w[i] - self._start_w[i]) * into_s / length_s
            part_j = self._counts[i] * into_s * (self._start_w[i] + at_w) / 2
            if self._shape is not None:
                shape, scale, shaped, at_start_j = self._shape
                power_j = shape._cumulative(self.t_s[i] + into_s, "energy") - at_start_j[i]
                part_j = np.where(shaped[i], scale[i] * power_j, part_j)
            result: FloatArray = self._cum_j[i] + part_j
        elif what == "spanned":
            result = self._cum_span_s[i] + self._counts[i] * into_s
        else:
            result = self._cum_s[i] + self._fine[i] * into_s
        return result

    def interval_power_w(self, edges_s: FloatArray) -> FloatArray:
        """The average power over each interval between ``edges_s``, as ``energy_j`` has it.

        NaN where the curve accounts for none of an interval.
        """
        edges_s = np.asarray(edges_s, dtype=np.float64)
        energy = self.energy_j(edges_s[:-1], edges_s[1:])
        spanned = self.spanned_s(edges_s[:-1], edges_s[1:])
        with np.errstate(invalid="ignore", divide="ignore"):
            power: FloatArray = np.where(spanned > 0, energy / spanned, np.nan)
        return power

    def edges_s(self, start_s: float, end_s: float) -> FloatArray:
        """``start_s``, the curve's sample times strictly between, and ``end_s``."""
        inside = self.t_s[(self.t_s > start_s) & (self.t_s < end_s)]
        return np.concatenate([[start_s], inside, [end_s]])

    def power_w(self) -> tuple[FloatArray, FloatArray]:
        """The average power of each fine segment, at its middle."""
        keep = self._fine > 0
        middle_s = (self.t_s[:-1] + self.t_s[1:]) / 2
        return middle_s[keep], ((self._start_w + self._end_w) / 2)[keep]


def counter_threshold_s(t_s: FloatArray, threshold_s: float) -> float:
    """The gap threshold of a counter read at ``t_s``: three median intervals, or more.

    A counter read with every full reading gets the samples' own ``threshold_s``; one
    read at 1 Hz, 3 s.
    """
    if t_s.size < 2:
        return threshold_s
    return max(threshold_s, 3.0 * float(np.median(np.diff(t_s))))


def _shaped(
    t_s: FloatArray, delta_j: FloatArray, fine: FloatArray, shape: EnergyCurve
) -> EnergyCurve:
    """Counter intervals that ``shape`` covers, spread as it is; the others linear."""
    length_s = np.diff(t_s)
    start, end = t_s[:-1], t_s[1:]
    shape_j = shape.energy_j(start, end)
    covered = shape.covered_s(start, end) >= (1.0 - 1e-9) * length_s
    shaped = covered & (shape_j > 0)
    scale = np.where(shaped, delta_j / np.where(shaped, shape_j, 1.0), 0.0)
    power_w = delta_j / length_s
    curve = EnergyCurve(t_s, power_w, power_w, np.ones_like(power_w), fine)
    curve._shape = (shape, scale, shaped, shape._cumulative(start, "energy"))
    return curve


def _distinct_times(t_s: FloatArray, values: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Drop all but the last of samples sharing a time."""
    keep = np.append(np.diff(t_s) > 0, True) if t_s.size else np.zeros(0, dtype=bool)
    return t_s[keep], values[keep]
