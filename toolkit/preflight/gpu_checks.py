"""Pure evaluation of a node's GPU facts into checks: NVML's view, against the inventory.

The facts come from ``toolkit/node/facts.py`` (``gpu_facts``) on each node, read into
``toolkit.nodeinfo.gpu_facts.GpuFacts``; nothing here touches a node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from toolkit.nodeinfo.gpu_facts import GpuDeviceFacts, GpuFacts
from toolkit.preflight.result import Check, Status

# NVML's clocks-event reason bits (``nvmlClocksEventReason*``); the values are NVML's.
CLOCKS_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks",
}
# Reasons that are normal on an idle GPU: not worth a warning.
IDLE_CLOCKS_EVENTS = 0x1 | 0x2 | 0x10 | 0x100


def clocks_event_names(mask: int) -> list[str]:
    """The names of the bits set in a clocks-event reasons mask (unknown bits in hex)."""
    names = [name for bit, name in CLOCKS_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCKS_EVENT_REASONS)
    if unknown:
        names.append(hex(unknown))
    return names


def gpu_checks(node: str, gpus: GpuFacts, expected_count: int | None) -> list[Check]:
    """One node's GPUs (``gpus`` of its facts) against the inventory's count.

    Each check covers every GPU of the node and names the offending ones by index and
    UUID. No GPU expected and none found: no checks at all.
    """
    devices = gpus.by_index()
    available = gpus.available
    count = (gpus.count or len(devices)) if available else 0
    expected = expected_count or 0
    if not expected and not count:
        return []
    checks: list[Check] = []
    if available:
        listed = ", ".join(f"{_index(d)}:{d.uuid}" for d in devices)
        measured = f"{count} GPU(s)" + (f": {listed}" if listed else "")
    else:
        measured = f"no GPU visible ({gpus.reason or 'unknown'})"
    checks.append(
        Check(
            "gpu.count",
            node,
            "pass" if count == expected else "fail",
            measured,
            f"{expected} (the inventory's gpus)",
            "a GPU is missing or the inventory is wrong: check nvidia-smi -L on the node, "
            "the driver (dmesg for XIDs), and pynvml (nvidia-ml-py) in the node's Python; "
            "or set the node's gpus: in the inventory",
        )
    )
    if not available:
        return checks
    checks.append(_driver_recorded(node, gpus))
    errors = [f"{k}: {v}" for k, v in gpus.errors.items()]
    errors += [f"GPU {_index(d)} {k}: {v}" for d in devices for k, v in d.errors.items()]
    if errors:
        checks.append(
            Check(
                "gpu.nvml",
                node,
                "fail",
                "; ".join(errors),
                "no NVML errors",
                "NVML could not read a GPU: look for XIDs in dmesg (GPU fallen off the bus?); "
                "a reset (nvidia-smi -r) or a reboot may bring it back",
            )
        )
    checks += [
        c
        for c in (
            _ecc_check(node, devices),
            _remap_check(node, devices),
            _persistence_check(node, devices),
            _clocks_check(node, devices),
            _pcie_check(node, devices),
            _nvlink_check(node, devices),
        )
        if c is not None
    ]
    return checks


def driver_checks(gpus: Mapping[str, GpuFacts]) -> list[Check]:
    """The same NVIDIA driver on every node with GPUs: odd nodes fail (like versions)."""
    seen: dict[str, str] = {}
    for node, g in gpus.items():
        if g.available and g.driver_version:
            seen[node] = g.driver_version
    if not seen:
        return []
    common, _ = Counter(seen.values()).most_common(1)[0]
    return [
        Check(
            "gpu.driver_match",
            node,
            "pass" if version == common else "fail",
            version,
            f"{common} (as on the other nodes)",
            "install the same NVIDIA driver on every node: NCCL and CUDA behave differently "
            "across driver versions",
        )
        for node, version in seen.items()
    ]


def _index(gpu: GpuDeviceFacts) -> str:
    return "?" if gpu.index is None else str(gpu.index)


def _driver_recorded(node: str, gpus: GpuFacts) -> Check:
    driver, cuda = gpus.driver_version, gpus.cuda_driver_version
    return Check(
        "gpu.driver",
        node,
        "pass" if driver else "warn",
        f"driver {driver or 'unknown'}, CUDA {cuda or 'unknown'}",
        "recorded",
        "" if driver else "NVML did not report the driver version: check nvidia-smi on the node",
    )


def _ecc_check(node: str, devices: Sequence[GpuDeviceFacts]) -> Check | None:
    counts = {
        d.label: d.ecc_volatile_uncorrected
        for d in devices
        if d.ecc_volatile_uncorrected is not None
    }
    if not counts:
        return None
    bad = [f"{n}: {c}" for n, c in counts.items() if c > 0]
    return Check(
        "gpu.ecc",
        node,
        "fail" if bad else "pass",
        "; ".join(bad) if bad else f"0 volatile uncorrected ECC errors on {len(counts)} GPU(s)",
        "0 volatile uncorrected ECC errors",
        "uncorrected memory errors since the driver loaded: drain the node, read "
        "nvidia-smi -q -d ECC,ROW_REMAPPER and the XIDs in dmesg; reset the GPU, and "
        "replace it if they come back",
    )


def _remap_check(node: str, devices: Sequence[GpuDeviceFacts]) -> Check | None:
    rows = {d.label: d.remapped_rows for d in devices if d.remapped_rows is not None}
    if not rows:
        return None
    failing, warning = [], []
    for name, r in rows.items():
        if r.failure:
            failing.append(f"{name}: remapping failed")
        elif r.pending:
            failing.append(f"{name}: remap pending")
        elif r.uncorrected > 0:
            warning.append(f"{name}: {r.uncorrected} row(s) remapped for uncorrected errors")
    status: Status = "fail" if failing else "warn" if warning else "pass"
    return Check(
        "gpu.row_remap",
        node,
        status,
        "; ".join(failing + warning) or f"no pending or failed remaps on {len(rows)} GPU(s)",
        "no pending or failed remaps, no uncorrected remaps",
        "a pending remap takes effect at the next GPU reset (nvidia-smi -r, or reboot); a "
        "failed remap means the GPU ran out of spare rows: replace it",
    )


def _persistence_check(node: str, devices: Sequence[GpuDeviceFacts]) -> Check | None:
    modes = {d.label: d.persistence_mode for d in devices if d.persistence_mode is not None}
    if not modes:
        return None
    off = [n for n, on in modes.items() if not on]
    return Check(
        "gpu.persistence_mode",
        node,
        "warn" if off else "pass",
        f"off on {', '.join(off)}" if off else f"on for {len(modes)} GPU(s)",
        "on",
        "without persistence the driver unloads between jobs and every start pays for it: "
        "run nvidia-persistenced (or nvidia-smi -pm 1)",
    )


def _clocks_check(node: str, devices: Sequence[GpuDeviceFacts]) -> Check | None:
    masks = {d.label: d.clocks_event_reasons for d in devices if d.clocks_event_reasons is not None}
    if not masks:
        return None
    bad = [
        f"{n}: {', '.join(clocks_event_names(m & ~IDLE_CLOCKS_EVENTS))}"
        for n, m in masks.items()
        if m & ~IDLE_CLOCKS_EVENTS
    ]
    return Check(
        "gpu.clocks_events",
        node,
        "warn" if bad else "pass",
        "; ".join(bad) if bad else f"none beyond idle on {len(masks)} GPU(s)",
        "only gpu_idle, applications_clocks, sync_boost or display_clocks at idle",
        "the GPU slows its clocks while idle for power, heat or a hardware signal: read "
        "nvidia-smi -q -d PERFORMANCE, check cooling, power cables and power limits",
    )


def _pcie_check(node: str, devices: Sequence[GpuDeviceFacts]) -> Check | None:
    slow, seen = [], 0
    for d in devices:
        parts = []
        for prefix, now, top in (
            ("Gen", d.pcie_gen, d.pcie_gen_max),
            ("x", d.pcie_width, d.pcie_width_max),
        ):
            if now is None or top is None:
                continue
            seen += 1
            if now < top:
                parts.append(f"{prefix}{now} of {prefix}{top}")
        if parts:
            slow.append(f"{d.label}: {', '.join(parts)}")
    if not seen:
        return None
    return Check(
        "gpu.pcie_link",
        node,
        "warn" if slow else "pass",
        "; ".join(slow) if slow else "every link at its max generation and width",
        "current generation and width = max",
        "many GPUs downtrain the PCIe link at idle to save power (the generation comes back "
        "under load): recheck under load (nvidia-smi -q -d PCI) before suspecting a bad "
        "slot, riser or BIOS setting; a narrower width than max does not recover at load",
    )


def _nvlink_check(node: str, devices: Sequence[GpuDeviceFacts]) -> Check | None:
    links = {d.label: list(d.nvlink_active) for d in devices if d.nvlink_active}
    if not links:
        return None
    down = {n: [i for i, active in enumerate(states) if not active] for n, states in links.items()}
    down = {n: idx for n, idx in down.items() if idx}
    total = sum(len(s) for s in links.values())
    return Check(
        "gpu.nvlink",
        node,
        "fail" if down else "pass",
        "; ".join(f"{n}: link(s) {', '.join(map(str, idx))} inactive" for n, idx in down.items())
        or f"{total} link(s) active on {len(links)} GPU(s)",
        "every NVLink link active",
        "an inactive NVLink sends GPU traffic over PCIe: check nvidia-smi nvlink -s, that "
        "nvidia-fabricmanager runs (HGX/NVSwitch systems), and XIDs in dmesg; a PCIe card "
        "without an NVLink bridge reports its links inactive",
    )
