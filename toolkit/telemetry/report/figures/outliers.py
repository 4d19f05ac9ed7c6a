"""Outliers: the devices (or whole nodes) that draw more, run hotter or throttle more.

Every GPU is compared with the cluster's median GPU, and every host with the median
host (only when all hosts measure power the same way: an IPMI wall reading and a
model are not alike). A device is an outlier on a figure when it is past a threshold:

- average power at least 15% above or below the median (a GPU that idles while the
  others work is as worth naming as one that draws more);
- energy at least 15% above the median;
- highest temperature at least 10 °C above the median's (from the bucketed view:
  the hottest bucket mean, not a single sample);
- time throttled beyond the median's by 5% of the window (and at least a second).

When every device of a kind on a node is out on the same figure, in the same
direction, the node is named once instead. Pure: figures in, outliers out.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from toolkit.telemetry.report.figures.energy import DeviceReport, NodeReport

POWER_EXCESS = 0.15
HOTTER_C = 10.0
THROTTLED_SHARE = 0.05
MIN_THROTTLED_S = 1.0
# Fewer devices than this: no median worth comparing with.
MIN_PEERS = 3


@dataclass(frozen=True)
class DeviceFigures:
    """What a device is compared on.

    Attributes:
        node: Its node.
        device: ``host`` or the GPU UUID.
        kind: ``host`` or ``gpu``.
        energy_j: Energy over the window.
        avg_power_w: Average power (None without energy).
        throttled_s: Time throttled.
        max_temperature_c: The hottest bucket of its view (None without readings).
        power_source: How it measures power (hosts are compared only when alike).
    """

    node: str
    device: str
    kind: str
    energy_j: float
    avg_power_w: float | None
    throttled_s: float
    max_temperature_c: float | None = None
    power_source: str | None = None

    @classmethod
    def of(cls, device: DeviceReport) -> DeviceFigures:
        """A device's figures, and its hottest bucket from its view."""
        hottest = None
        view = device.view
        temperature = view.readings.get("temperature_c") if view is not None else None
        if temperature is not None and not np.isnan(temperature).all():
            hottest = float(np.nanmax(temperature))
        return cls(
            node=device.node,
            device=device.device,
            kind=device.kind,
            energy_j=device.energy_j,
            avg_power_w=device.avg_power_w,
            throttled_s=device.throttled_s,
            max_temperature_c=hottest,
            power_source=device.power_source,
        )


@dataclass(frozen=True)
class Rule:
    """When a figure is out.

    Attributes:
        metric: The figure (a ``DeviceFigures`` field).
        label: How it reads.
        unit: Its unit.
        relative: Whether ``threshold`` is a share of the median (else an excess in ``unit``).
        threshold: How far past the median is out.
        below: Whether falling short by as much is out too.
    """

    metric: str
    label: str
    unit: str
    relative: bool
    threshold: float
    below: bool = False


def rules(window_s: float) -> tuple[Rule, ...]:
    """The thresholds, for a window of ``window_s`` seconds."""
    throttled_s = max(THROTTLED_SHARE * window_s, MIN_THROTTLED_S)
    return (
        Rule("avg_power_w", "avg power", "W", True, POWER_EXCESS, below=True),
        Rule("energy_j", "energy", "J", True, POWER_EXCESS),
        Rule("max_temperature_c", "max temperature", "°C", False, HOTTER_C),
        Rule("throttled_s", "throttled", "s", False, throttled_s),
    )


@dataclass(frozen=True)
class Outlier:
    """One device (or node) past a threshold on one figure.

    Attributes:
        metric: The figure.
        node: The node.
        device: The device; None when it stands for every device of ``kind`` on the node.
        kind: ``gpu`` or ``host``.
        value: Its figure (for a node: the median of its devices').
        median: The cluster's median device.
        excess: ``value / median - 1`` for relative rules, ``value - median`` otherwise.
        devices: How many devices it stands for.
        score: ``|excess|`` over the threshold: 1 is at the threshold, 2 twice as far.
    """

    metric: str
    node: str
    device: str | None
    kind: str
    value: float
    median: float
    excess: float
    devices: int
    score: float


@dataclass(frozen=True)
class Outliers:
    """The comparison and what stood out.

    Attributes:
        rules: The thresholds used.
        medians: Kind -> figure -> the median device's (None when not compared).
        compared: Kind -> devices compared.
        found: The outliers, furthest out first, taking turns between figures.
    """

    rules: tuple[Rule, ...]
    medians: dict[str, dict[str, float | None]]
    compared: dict[str, int]
    found: list[Outlier]

    def rule(self, metric: str) -> Rule:
        """The rule of ``metric``."""
        return next(r for r in self.rules if r.metric == metric)

    def subjects(self) -> list[tuple[str, str | None, list[Outlier]]]:
        """(node, device, its outliers) per device or node named, furthest out first."""
        by: dict[tuple[str, str | None], list[Outlier]] = {}
        for outlier in self.found:
            by.setdefault((outlier.node, outlier.device), []).append(outlier)
        return [(node, device, found) for (node, device), found in by.items()]


def report_figures(nodes: Iterable[NodeReport]) -> list[DeviceFigures]:
    """Every device's figures, in node and device order."""
    return [DeviceFigures.of(d) for node in nodes for d in node.devices.values()]


def find_outliers(devices: Sequence[DeviceFigures], window_s: float) -> Outliers:
    """Compare each kind's devices with their median; the outliers, furthest out first."""
    thresholds = rules(window_s)
    medians: dict[str, dict[str, float | None]] = {}
    compared: dict[str, int] = {}
    found: list[Outlier] = []
    for kind in ("gpu", "host"):
        peers = [d for d in devices if d.kind == kind]
        if kind == "host" and len({d.power_source for d in peers}) > 1:
            continue
        compared[kind] = len(peers)
        medians[kind] = {}
        for rule in thresholds:
            values = {(d.node, d.device): _value(d, rule.metric) for d in peers}
            known = [v for v in values.values() if v is not None]
            if len(known) < MIN_PEERS:
                medians[kind][rule.metric] = None
                continue
            median = statistics.median(known)
            medians[kind][rule.metric] = median
            out = [
                Outlier(rule.metric, node, device, kind, value, median, excess, 1, score)
                for (node, device), value in values.items()
                if value is not None
                for excess, score in [_excess(rule, value, median)]
                if score >= 1.0 and (excess > 0 or rule.below)
            ]
            found += _by_node(out, peers, rule)
    return Outliers(thresholds, medians, compared, _interleaved(found))


def _interleaved(found: list[Outlier]) -> list[Outlier]:
    """Furthest out first, taking turns between figures.

    Scores of different figures do not compare (a GPU throttled all run scores far
    above one drawing 25% more), so the first of each figure come before the seconds.
    """
    ranked = sorted(found, key=lambda o: (-o.score, -o.devices, o.node, o.device or "", o.metric))
    place: dict[str, int] = {}
    turn = []
    for outlier in ranked:
        turn.append(place.get(outlier.metric, 0))
        place[outlier.metric] = turn[-1] + 1
    order = sorted(range(len(ranked)), key=lambda i: (turn[i], -ranked[i].score))
    return [ranked[i] for i in order]


def _value(device: DeviceFigures, metric: str) -> float | None:
    value = getattr(device, metric)
    return None if value is None or not np.isfinite(value) else float(value)


def _excess(rule: Rule, value: float, median: float) -> tuple[float, float]:
    """How far ``value`` is from ``median``, and that over the threshold (0: not out)."""
    if rule.relative:
        if median <= 0:
            return 0.0, 0.0
        excess = value / median - 1.0
    else:
        excess = value - median
    return excess, abs(excess) / rule.threshold


def _by_node(out: list[Outlier], peers: list[DeviceFigures], rule: Rule) -> list[Outlier]:
    """Name a node once when every one of its devices (two or more) is out the same way."""
    on_node: dict[str, int] = {}
    for device in peers:
        on_node[device.node] = on_node.get(device.node, 0) + 1
    result: list[Outlier] = []
    for node in dict.fromkeys(o.node for o in out):
        mine = [o for o in out if o.node == node]
        if len(mine) >= 2 and len(mine) == on_node[node] and len({o.excess > 0 for o in mine}) == 1:
            first = mine[0]
            value = statistics.median(o.value for o in mine)
            excess, score = _excess(rule, value, first.median)
            result.append(
                Outlier(
                    rule.metric,
                    node,
                    None,
                    first.kind,
                    value,
                    first.median,
                    excess,
                    len(mine),
                    score,
                )
            )
        else:
            result += mine
    return result
