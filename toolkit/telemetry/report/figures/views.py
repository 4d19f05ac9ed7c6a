"""What the report keeps of a device's samples for drawing: time buckets over the window.

A device's full-resolution samples are read, turned into figures and dropped; the
plots and the page draw from these buckets instead (at most ``MAX_BUCKETS`` per device,
whatever the run's length), so a day of a thousand GPUs still draws from a few MB.
Figures never come from here: they are computed on every sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from toolkit.telemetry.report.inputs.series import DeviceSeries, FloatArray

MAX_BUCKETS = 1_000
# The readings drawn; power comes from what the energy figure measures (see energy.py).
DRAWN = ("gpu_util_pct", "cpu_util_pct", "sm_clock_mhz", "temperature_c")


@dataclass(frozen=True)
class Buckets:
    """Equal time buckets over the window.

    Attributes:
        start_s: The window's start (head timeline).
        width_s: Each bucket's length.
        count: How many.
    """

    start_s: float
    width_s: float
    count: int

    @classmethod
    def over(cls, start_s: float, end_s: float, rate_hz: float) -> Buckets:
        """At most ``MAX_BUCKETS``, each at least two sample periods long.

        One period would leave every other bucket empty when samples fall on the
        buckets' edges (a steady sampler, a window that starts on a sample): the
        views would show gaps that the samples do not have.
        """
        duration_s = max(end_s - start_s, 1e-9)
        count = max(1, min(MAX_BUCKETS, math.ceil(duration_s * rate_hz / 2)))
        return cls(start_s, duration_s / count, count)

    @property
    def middle_s(self) -> FloatArray:
        """Each bucket's middle."""
        return np.asarray(
            self.start_s + (np.arange(self.count) + 0.5) * self.width_s, dtype=np.float64
        )

    def index(self, t_s: FloatArray) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """Each time's bucket, and which times fall in the window."""
        i = np.floor((t_s - self.start_s) / self.width_s).astype(np.int64)
        inside = (i >= 0) & (i < self.count)
        return i, inside

    def mean(self, t_s: FloatArray, values: FloatArray) -> FloatArray:
        """The mean of ``values`` in each bucket; NaN where a bucket has none."""
        i, inside = self.index(t_s)
        i, values = i[inside], values[inside]
        sums = np.bincount(i, weights=values, minlength=self.count)
        counts = np.bincount(i, minlength=self.count)
        with np.errstate(invalid="ignore", divide="ignore"):
            result: FloatArray = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        return result

    def fraction(self, t_s: FloatArray, flags: npt.NDArray[np.bool_]) -> FloatArray:
        """The share of samples in each bucket whose flag is set; NaN where none."""
        return self.mean(t_s, flags.astype(np.float64))


@dataclass(frozen=True)
class DeviceView:
    """One device, bucketed for drawing.

    Attributes:
        buckets: The time buckets (shared by every device of the report).
        power_w: Mean power per bucket (from the samples the energy figure uses).
        readings: Reading -> its mean per bucket, for the readings the device has.
        throttled: Share of samples per bucket with a throttling reason set.
    """

    buckets: Buckets
    power_w: FloatArray | None
    readings: dict[str, FloatArray] = field(default_factory=dict)
    throttled: FloatArray | None = None


def device_view(
    series: DeviceSeries,
    buckets: Buckets,
    power: tuple[FloatArray, FloatArray] | None,
    throttling_mask: int,
) -> DeviceView:
    """Bucket a device's samples; ``power`` is (times, watts) as the report measured it."""
    readings = {name: buckets.mean(*series.values(name)) for name in DRAWN if name in series.fields}
    throttled = None
    t, reasons = series.values("clocks_event_reasons")
    if t.size:
        throttled = buckets.fraction(t, (reasons.astype(np.int64) & throttling_mask) != 0)
    return DeviceView(
        buckets=buckets,
        power_w=buckets.mean(*power) if power is not None and power[0].size else None,
        readings=readings,
        throttled=throttled,
    )
