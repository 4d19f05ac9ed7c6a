"""Pure grading of the per-node load tests (``NodeLoad``) into checks.

Every device is compared with its peers: the median of every device of the same
model across the cluster (``load.gemm``, ``load.h2d``, ``load.d2h``, ``load.membw``).
A device below ``PeerFractions.warn_below`` of that median warns, below
``fail_below`` fails, so a slow node is named even where no limit for its model is
known. Where the model's limits are known (``toolkit.preflight.load.gpu_limits``) the
device is graded against them too, and the worse of the two counts. ``load.throttle``
grades the clocks-event reasons NVML reported during the GEMM.

One check per node and metric; the devices that warn or fail are named in it.
A metric no device of a node measured (host copies on a CPU-only node) gives no check.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from toolkit.preflight.load.gpu_limits import GpuLimits, Limit
from toolkit.preflight.load.node import DeviceLoad, NodeLoad
from toolkit.rundir.preflight import Check, Status
from toolkit.telemetry.clock_events import CLOCK_EVENT_REASONS, NOT_THROTTLING

# Reasons the hardware slows the clocks for (a power brake signal, heat, a slowdown
# line): a GPU that shows one under a few seconds of GEMM is not fit for a long run.
HARDWARE_THROTTLE = 0x8 | 0x40 | 0x80
STATUS_ORDER: dict[Status, int] = {"pass": 0, "warn": 1, "fail": 2}


@dataclass(frozen=True)
class PeerFractions:
    """How far below its peers' median a device may fall.

    Attributes:
        warn_below: Below this fraction of the median it warns.
        fail_below: Below this fraction it fails.
    """

    warn_below: float = 0.8
    fail_below: float = 0.6

    def grade(self, value: float, median: float) -> Status:
        """pass, warn or fail for ``value`` against ``median``."""
        if value < self.fail_below * median:
            return "fail"
        return "warn" if value < self.warn_below * median else "pass"


@dataclass(frozen=True)
class _Metric:
    name: str
    unit: str
    value: Callable[[DeviceLoad], float | None]
    limit: Callable[[GpuLimits], Limit | None]
    hint: str


METRICS = (
    _Metric(
        "load.gemm",
        "TFLOP/s",
        lambda d: d.gemm_tflops,
        lambda g: g.gemm_tflops,
        "the node computes slower than its peers: look at load.throttle, other processes on "
        "it (top, nvidia-smi), the CPU frequency governor and the GPUs' clocks and power limits",
    ),
    _Metric(
        "load.h2d",
        "GB/s",
        lambda d: d.h2d_gb_s,
        lambda g: g.host_device_gb_s,
        "host->device copies are slow: check the PCIe link (nvidia-smi -q -d PCIE), "
        "the GPU's NUMA placement and IOMMU settings",
    ),
    _Metric(
        "load.d2h",
        "GB/s",
        lambda d: d.d2h_gb_s,
        lambda g: g.host_device_gb_s,
        "device->host copies are slow: check the PCIe link (nvidia-smi -q -d PCIE), "
        "the GPU's NUMA placement and IOMMU settings",
    ),
    _Metric(
        "load.membw",
        "GB/s",
        lambda d: d.memory_gb_s,
        lambda g: g.memory_gb_s,
        "memory copies are slow: look for memory errors (ECC, row remaps), a throttled "
        "memory clock, or other processes using the memory bandwidth",
    ),
)


def load_checks(
    loads: Mapping[str, NodeLoad],
    limits: Mapping[str, GpuLimits] | None = None,
    peers: PeerFractions = PeerFractions(),
) -> list[Check]:
    """Grade every node's load test.

    Args:
        loads: Node name -> its load test.
        limits: Device model (``DeviceLoad.model``) -> its limits; a model not here is
            graded against its peers only.
        peers: How far below its peers' median a device may fall.

    Returns:
        Per node in name order: ``load.gemm``, ``load.h2d``, ``load.d2h``,
        ``load.membw`` (each where measured) and ``load.throttle`` (on GPU nodes).
    """
    limits = limits or {}
    checks: list[Check] = []
    medians = {m.name: _medians(loads, m) for m in METRICS}
    for node in sorted(loads):
        load = loads[node]
        for metric in METRICS:
            check = _metric_check(node, load.devices, metric, medians[metric.name], limits, peers)
            if check is not None:
                checks.append(check)
        throttle = throttle_check(node, load)
        if throttle is not None:
            checks.append(throttle)
    return checks


def _medians(loads: Mapping[str, NodeLoad], metric: _Metric) -> dict[str, tuple[float, int]]:
    """Model -> the median of its devices' values and how many there are (2 or more)."""
    values: dict[str, list[float]] = {}
    for load in loads.values():
        for d in load.devices:
            v = metric.value(d)
            if v is not None:
                values.setdefault(d.model, []).append(v)
    return {model: (statistics.median(vs), len(vs)) for model, vs in values.items() if len(vs) > 1}


def _metric_check(
    node: str,
    devices: Sequence[DeviceLoad],
    metric: _Metric,
    medians: Mapping[str, tuple[float, int]],
    limits: Mapping[str, GpuLimits],
    peers: PeerFractions,
) -> Check | None:
    measured = [(d, v) for d in devices if (v := metric.value(d)) is not None]
    if not measured:
        return None
    worst: Status = "pass"
    bad: list[str] = []
    thresholds: list[str] = []
    for d, value in measured:
        statuses: list[Status] = []
        notes: list[str] = []
        if d.model in medians:
            median, count = medians[d.model]
            statuses.append(peers.grade(value, median))
            notes.append(f"{value / median:.0%} of the median {median:.4g} of {count} {d.model}")
        gpu = limits.get(d.model)
        limit = metric.limit(gpu) if gpu is not None else None
        if limit is not None:
            statuses.append(limit.grade(value))
            thresholds.append(limit.describe(metric.unit))
        status = _worst(statuses)
        if status != "pass":
            note = f" ({'; '.join(notes)})" if notes else ""
            bad.append(f"{d.device} {status}: {value:.4g} {metric.unit}{note}")
        worst = _worst([worst, status])
    if not bad:
        values = [v for _, v in measured]
        lo, hi = min(values), max(values)
        span = f"{lo:.4g}" if lo == hi else f"{lo:.4g}-{hi:.4g}"
        models = {d.model for d, _ in measured}
        peer = "; ".join(
            f"median {medians[m][0]:.4g} of {medians[m][1]} {m}"
            for m in sorted(models & set(medians))
        )
        text = f"{span} {metric.unit} on {len(measured)} device(s)" + (f" ({peer})" if peer else "")
    else:
        text = "; ".join(bad)
    threshold = f">= {peers.warn_below:.0%} of the median of the same hardware"
    if thresholds:
        threshold += "; " + "; ".join(dict.fromkeys(thresholds))
    return Check(metric.name, node, worst, text, threshold, "" if worst == "pass" else metric.hint)


def throttle_check(node: str, load: NodeLoad) -> Check | None:
    """The clocks-event reasons NVML reported during the GEMM; None on a CPU-only node.

    A hardware reason (``hw_slowdown``, ``hw_thermal``, ``hw_power_brake``) in any
    sample fails; another reason that slows the clocks (``sw_power_cap``,
    ``sw_thermal``...) warns. A GPU node NVML could not be read on warns.
    """
    gpus = [d for d in load.devices if d.device != "cpu"]
    if not gpus:
        return None
    threshold = "no hardware slowdown; no power cap or thermal slowdown under load"
    sampled = [d for d in gpus if d.samples > 0]
    if not sampled:
        reason = load.sampling_skipped or "no NVML samples"
        return Check(
            "load.throttle",
            node,
            "warn",
            f"not read during the load: {reason}",
            threshold,
            "install nvidia-ml-py on the node so that clocks and throttling are seen under load",
        )
    worst: Status = "pass"
    bad = []
    for d in sampled:
        events = {bit: n for bit, n in d.clocks_events.items() if not bit & NOT_THROTTLING and n}
        if not events:
            continue
        status: Status = "fail" if any(bit & HARDWARE_THROTTLE for bit in events) else "warn"
        worst = _worst([worst, status])
        reasons = ", ".join(
            f"{CLOCK_EVENT_REASONS.get(bit, f'0x{bit:x}')} in {n / d.samples:.0%}"
            for bit, n in sorted(events.items(), key=lambda kv: -kv[1])
        )
        bad.append(f"{d.device} {status}: {reasons} of {d.samples} samples{_clocks(d)}")
    if bad:
        text = "; ".join(bad)
    else:
        samples = sum(d.samples for d in sampled)
        text = f"no throttling in {samples} samples on {len(sampled)} GPU(s){_clocks(*sampled)}"
    hint = (
        ""
        if worst == "pass"
        else "the GPU slowed its clocks under load: check cooling and fans, power cables and "
        "supplies (power brake), power limits (nvidia-smi -q -d POWER,PERFORMANCE)"
    )
    return Check("load.throttle", node, worst, text, threshold, hint)


def _clocks(*devices: DeviceLoad) -> str:
    """``; SM clock 1410-1980 MHz, power 350-700 W`` over ``devices`` (empty if unread)."""
    parts = []
    clocks = [d.sm_clock_mhz for d in devices if d.sm_clock_mhz is not None]
    if clocks:
        parts.append(
            f"SM clock {min(c.min for c in clocks):.0f}-{max(c.max for c in clocks):.0f} MHz"
        )
    power = [d.power_w for d in devices if d.power_w is not None]
    if power:
        lo, hi = min(p.min for p in power), max(p.max for p in power)
        parts.append(f"power {lo:.0f}-{hi:.0f} W")
    return "; " + ", ".join(parts) if parts else ""


def _worst(statuses: Sequence[Status]) -> Status:
    """The worst of ``statuses``; pass for none."""
    worst: Status = "pass"
    for status in statuses:
        if STATUS_ORDER[status] > STATUS_ORDER[worst]:
            worst = status
    return worst
