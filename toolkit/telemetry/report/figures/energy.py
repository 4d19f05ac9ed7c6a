"""Per-device and per-node energy, power, throttling and gaps over the run's window."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from toolkit.rundir import NodeManifest
from toolkit.telemetry.clock_events import CLOCK_EVENT_REASONS, NOT_THROTTLING
from toolkit.telemetry.report.figures.curves import EnergyCurve, Gap, counter_threshold_s, find_gaps
from toolkit.telemetry.report.figures.views import Buckets, DeviceView, device_view
from toolkit.telemetry.report.inputs.series import DeviceSeries, FloatArray
from toolkit.telemetry.report.inputs.timeline import Window

COUNTER = "counter"
INTEGRATED = "integrated power"
MODELLED = "modelled"
NO_ENERGY = "none"


@dataclass(frozen=True)
class DeviceReport:
    """One device's figures over the window.

    Attributes:
        node: The device's node.
        device: ``host`` or the GPU UUID.
        kind: ``host`` or ``gpu``.
        samples: Samples recorded (all kinds, whole trace).
        energy_j: Energy over the window (what was measured of it, see ``gaps``).
        energy_source: ``counter``, ``integrated power``, ``modelled`` (host estimate
            from CPU utilisation) or ``none``.
        energy_covered_s: Seconds of the window the energy figure accounts for (a counter's
            delta over an inner gap is measured, so it counts).
        avg_power_w: ``energy_j`` over ``energy_covered_s``.
        peak_power_w: Highest power in the window (instant power where recorded, else
            the counter's average between readings).
        power_source: How ``power_w`` was obtained, from the samples.
        covered_fraction: Share of the window not in a gap.
        gaps: Intervals without samples.
        throttled_s: Time with a throttling clocks-event reason set.
        throttle_reasons_s: Reason -> time it was set (throttling reasons only).
        counter_resets: Counter readings that went backwards (restarted counters).
        counted: Whether the node's total includes this device.
        counter: The energy counter curve, when the device has one (only while the
            report reads the node: ``light`` drops it).
        power: The power-sample curve, when the device reports ``power_w`` (likewise).
        peak_series: The power samples the peak comes from (likewise).
        view: The device bucketed for drawing.
    """

    node: str
    device: str
    kind: str
    samples: int
    energy_j: float
    energy_source: str
    energy_covered_s: float
    avg_power_w: float | None
    peak_power_w: float | None
    power_source: str | None
    covered_fraction: float
    gaps: list[Gap]
    throttled_s: float
    throttle_reasons_s: dict[str, float]
    counter_resets: int
    counted: bool = True
    counter: EnergyCurve | None = field(default=None, repr=False, compare=False)
    power: EnergyCurve | None = field(default=None, repr=False, compare=False)
    peak_series: tuple[FloatArray, FloatArray] | None = field(
        default=None, repr=False, compare=False
    )
    view: DeviceView | None = field(default=None, repr=False, compare=False)

    @property
    def energy_wh(self) -> float:
        """``energy_j`` in watt-hours."""
        return self.energy_j / 3600.0

    @property
    def partial(self) -> bool:
        """Whether part of the window has no samples."""
        return bool(self.gaps)

    @property
    def curve(self) -> EnergyCurve | None:
        """The curve ``energy_j`` comes from.

        The counter where the device has one (a RAPL or GPU meter, or the CPU model's
        own integral): ``device_report`` keeps none it did not read. Else the power's.
        """
        return self.counter if self.counter is not None else self.power

    def light(self) -> DeviceReport:
        """The figures and the view without the full-resolution curves."""
        return replace(self, counter=None, power=None, peak_series=None)


@dataclass(frozen=True)
class NodeReport:
    """One node's figures over the window.

    Attributes:
        name: The node.
        hostname: Its hostname.
        status: The sampler's status (``complete``, ``lost``, ``missing``).
        offset_s: Its clock offset from the head (subtracted from its times).
        uncertainty_s: The offset's uncertainty.
        error: Why its sampler failed, when it did.
        devices: Device -> its figures.
        energy_j: The node's energy: the sum over counted devices.
        scope: What ``energy_j`` sums (an IPMI host reading already includes the GPUs).
        avg_power_w: Sum of the counted devices' average power.
        peak_power_w: Highest sum of the counted devices' power at any sample time.
        samples: Samples recorded on the node.
        covered_fraction: Share of the window in which the node wrote samples.
        gaps: Intervals in which no device of the node wrote a sample.
    """

    name: str
    hostname: str
    status: str
    offset_s: float
    uncertainty_s: float
    error: str | None
    devices: dict[str, DeviceReport]
    energy_j: float
    scope: str
    avg_power_w: float | None
    peak_power_w: float | None
    samples: int
    covered_fraction: float
    gaps: list[Gap]

    @property
    def energy_wh(self) -> float:
        """``energy_j`` in watt-hours."""
        return self.energy_j / 3600.0

    @property
    def partial(self) -> bool:
        """Whether any of its devices misses part of the window."""
        return bool(self.gaps) or any(d.partial for d in self.devices.values())

    def light(self) -> NodeReport:
        """The figures and views without the full-resolution curves."""
        return replace(self, devices={k: d.light() for k, d in self.devices.items()})


def node_report(
    series: dict[str, DeviceSeries],
    node: NodeManifest,
    window: Window,
    threshold_s: float,
    buckets: Buckets | None = None,
) -> NodeReport:
    """One node's figures over ``window``, with the curves (``light`` drops them)."""
    devices = {dev: device_report(s, window, threshold_s, buckets) for dev, s in series.items()}
    host = devices.get("host")
    scope = "sum of devices"
    if host and host.energy_source == INTEGRATED and host.power_source == "ipmi":
        # The node's IPMI reading is wall power: the GPUs are in it already.
        scope = "host IPMI reading (whole node, GPUs included)"
        devices = {
            dev: d if dev == "host" else replace(d, counted=False) for dev, d in devices.items()
        }
    counted = [d for d in devices.values() if d.counted]
    all_t = np.sort(np.concatenate([s.t_s for s in series.values()] or [np.empty(0)]))
    gaps = find_gaps(all_t, window, threshold_s)
    averages = [d.avg_power_w for d in counted if d.avg_power_w is not None]
    return NodeReport(
        name=node.name,
        hostname=node.hostname,
        status=node.status,
        offset_s=node.offset_s,
        uncertainty_s=node.uncertainty_s,
        error=node.error,
        devices=devices,
        energy_j=float(sum(d.energy_j for d in counted)),
        scope=scope,
        avg_power_w=float(sum(averages)) if averages else None,
        peak_power_w=_peak_of_sum(counted, window, threshold_s),
        samples=sum(d.samples for d in devices.values()),
        covered_fraction=_covered_fraction(gaps, window),
        gaps=gaps,
    )


def device_report(
    series: DeviceSeries, window: Window, threshold_s: float, buckets: Buckets | None = None
) -> DeviceReport:
    """One device's energy, power, throttling and gaps over ``window`` (and its view)."""
    start, end = window.start_s, window.end_s
    gaps = find_gaps(series.t_s, window, threshold_s)
    t_p, power_w = series.values("power_w")
    power = EnergyCurve.from_power(t_p, power_w, threshold_s) if t_p.size >= 2 else None
    counter, resets = None, 0
    t_e, energy = series.values("energy_j")
    if t_e.size >= 2:
        # A GPU's counter (read at its own, lower rate) is spread over its own power
        # samples; a host's RAPL counter and its IPMI or modelled power differ in scope.
        counter, resets = EnergyCurve.from_counter(
            t_e,
            energy,
            counter_threshold_s(t_e, threshold_s),
            shape=power if series.kind == "gpu" else None,
            gaps=gaps,
        )
    rapl = series.values("rapl_package_j")[0].size > 0
    modelled = series.power_source == "model" and not rapl
    if modelled and (counter is not None or power is not None):
        # The host sensor's modelled energy_j is the integral of its modelled power,
        # not a meter: label it as the estimate it is. Its integral, not its samples':
        # each reading models the CPU time since the one before, so a sampler that
        # stalled (a loaded node) still accounts for the stalled time, where the
        # power samples' curve would leave it out.
        source, curve = MODELLED, counter if counter is not None else power
    elif counter is not None:
        source, curve = COUNTER, counter
    elif power is not None:
        curve = power
        source = MODELLED if series.power_source == "model" else INTEGRATED
    else:
        source, curve = NO_ENERGY, None
    energy_j = float(curve.energy_j(start, end)[0]) if curve else 0.0
    spanned_s = float(curve.spanned_s(start, end)[0]) if curve else 0.0
    # Peak power from the quantity the energy measures: a host's RAPL counter and its
    # IPMI or modelled power_w differ in scope, a GPU's do not.
    peak: tuple[FloatArray, FloatArray] | None = (t_p, power_w) if t_p.size else None
    if counter is not None and (peak is None or series.kind == "host"):
        peak = counter.power_w()
    peak_w = None
    if peak is not None:
        in_window = (peak[0] >= start) & (peak[0] <= end)
        peak_w = float(peak[1][in_window].max()) if in_window.any() else None
    if curve is not None and end > start:
        # No interval of the window may average more than the peak, or the average
        # (energy over time, the same curve's) could exceed it: a short window between
        # two samples has no sample of its own to be the peak.
        intervals = curve.interval_power_w(curve.edges_s(start, end))
        if np.isfinite(intervals).any():
            highest_w = float(np.nanmax(intervals))
            peak_w = highest_w if peak_w is None else max(peak_w, highest_w)
    throttled_s, reasons_s = _throttling(series, window, threshold_s)
    return DeviceReport(
        node=series.node,
        device=series.device,
        kind=series.kind,
        samples=int(series.t_s.size),
        energy_j=energy_j,
        energy_source=source,
        energy_covered_s=spanned_s,
        avg_power_w=energy_j / spanned_s if spanned_s > 0 else None,
        peak_power_w=peak_w,
        power_source=series.power_source,
        covered_fraction=_covered_fraction(gaps, window),
        gaps=gaps,
        throttled_s=throttled_s,
        throttle_reasons_s=reasons_s,
        counter_resets=resets,
        counter=counter,
        power=power,
        peak_series=peak,
        view=device_view(series, buckets, peak, ~NOT_THROTTLING) if buckets else None,
    )


def _covered_fraction(gaps: list[Gap], window: Window) -> float:
    missing_s = sum(g.duration_s for g in gaps)
    return max(0.0, 1.0 - missing_s / window.duration_s) if window.duration_s > 0 else 0.0


def _throttling(
    series: DeviceSeries, window: Window, threshold_s: float
) -> tuple[float, dict[str, float]]:
    """Seconds throttled, and per throttling reason; each sample holds until the next."""
    t, reasons = series.values("clocks_event_reasons")
    if t.size == 0:
        return 0.0, {}
    period_s = min(threshold_s / 3.0, 1.0)
    hold_s = np.append(np.diff(t), period_s)
    hold_s = np.where(hold_s > threshold_s, period_s, hold_s)
    lo = np.maximum(t, window.start_s)
    hi = np.minimum(t + hold_s, window.end_s)
    duration_s = np.clip(hi - lo, 0.0, None)
    masks = reasons.astype(np.int64) & ~NOT_THROTTLING
    throttled_s = float(duration_s[masks != 0].sum())
    reasons_s: dict[str, float] = {}
    for mask in np.unique(masks[masks != 0]):
        held_s = float(duration_s[masks == mask].sum())
        for bit in _bits(int(mask)):
            name = CLOCK_EVENT_REASONS.get(bit, f"0x{bit:x}")
            reasons_s[name] = reasons_s.get(name, 0.0) + held_s
    return throttled_s, dict(sorted(reasons_s.items(), key=lambda kv: -kv[1]))


def _bits(mask: int) -> list[int]:
    return [1 << i for i in range(mask.bit_length()) if mask >> i & 1]


def _peak_of_sum(devices: list[DeviceReport], window: Window, threshold_s: float) -> float | None:
    """The highest sum of the devices' power in the window.

    At any of their sample times, or averaged over any interval between them as their
    energy measures it: a short window has no sample of its own, and the node's average
    (energy over time, from the same curves) must not exceed its peak.
    """
    found: list[float] = []
    traces = [d.peak_series for d in devices if d.peak_series and d.peak_series[0].size]
    grid = np.unique(np.concatenate([t for t, _ in traces])) if traces else np.empty(0)
    grid = grid[(grid >= window.start_s) & (grid <= window.end_s)]
    if grid.size:
        total = np.zeros_like(grid)
        for t, power_w in traces:
            total += _held(t, power_w, grid, threshold_s)
        if not np.isnan(total).all():
            found.append(float(np.nanmax(total)))
    curves = [d.curve for d in devices if d.curve is not None and not d.curve.empty]
    if curves and window.end_s > window.start_s:
        edges = np.unique(np.concatenate([c.edges_s(window.start_s, window.end_s) for c in curves]))
        summed = np.zeros(edges.size - 1)
        for curve in curves:
            summed += np.nan_to_num(curve.interval_power_w(edges))
        found.append(float(summed.max()))
    return max(found) if found else None


def _held(t: FloatArray, power_w: FloatArray, grid: FloatArray, threshold_s: float) -> FloatArray:
    """Power interpolated at ``grid``; NaN outside the trace and inside its gaps."""
    values = np.interp(grid, t, power_w)
    i = np.searchsorted(t, grid, side="right") - 1
    exact = np.isin(grid, t)
    inside = (i >= 0) & (i < t.size - 1)
    step = np.where(inside, t[np.clip(i + 1, 0, t.size - 1)] - t[np.clip(i, 0, t.size - 1)], 0)
    ok = exact | (inside & (step <= threshold_s))
    return np.where(ok, values, np.nan)
