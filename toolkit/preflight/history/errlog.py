"""GPU errors in a node's kernel log: NVIDIA XID events, grouped, dated and graded.

The driver logs each XID as ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen
off the bus.``; read here from ``journalctl -k -o short-iso`` or ``dmesg --time-format
iso`` text (both prefix each line with an ISO 8601 time). Lines without a time still
count, undated. What each code means and what to do about it follows NVIDIA's XID
catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), whose
"resolution bucket" per code NVIDIA also publishes as data in NVSentinel
(https://github.com/NVIDIA/NVSentinel/blob/main/distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from toolkit.rundir.preflight import Check, Status

Severity = Literal["fatal", "app", "info", "unknown"]
RECENT_S = 24 * 3600.0


@dataclass(frozen=True)
class XidInfo:
    """What one XID code means.

    Attributes:
        mnemonic: NVIDIA's name for it.
        severity: ``fatal``: the GPU (or node) needs a reset or service before use;
            ``app``: an application's fault, a hardware suspect only when repeated;
            ``info``: recorded, no action.
        action: NVIDIA's immediate action, in words.
    """

    mnemonic: str
    severity: Severity
    action: str


# Codes from the catalog's Ampere-and-newer table; severity from its resolution bucket
# (RESET_GPU, RESTART_BM, WORKFLOW_*: fatal; RESTART_APP: app; IGNORE: info).
XIDS: dict[int, XidInfo] = {
    13: XidInfo("ROBUST_CHANNEL_GR_EXCEPTION", "app", "restart the application"),
    31: XidInfo("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "app", "restart the application"),
    43: XidInfo("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "info", "none"),
    45: XidInfo("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "info", "none unless other XIDs came first"),
    46: XidInfo("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "fatal", "reset the GPU"),
    48: XidInfo("ROBUST_CHANNEL_GPU_ECC_DBE", "fatal", "reset the GPU (uncorrectable ECC error)"),
    61: XidInfo("PMU_BREAKPOINT", "fatal", "reset the GPU; report it if it recurs"),
    62: XidInfo("PMU_HALT_ERROR", "fatal", "reset the GPU"),
    63: XidInfo(
        "INFOROM_DRAM_RETIREMENT_EVENT", "info", "none (a row remap, active after a reset)"
    ),
    64: XidInfo("INFOROM_DRAM_RETIREMENT_FAILURE", "fatal", "reset the GPU"),
    74: XidInfo("NVLINK_ERROR", "fatal", "reset the GPU; check nvidia-smi nvlink -e"),
    79: XidInfo("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "fatal", "reboot the node"),
    92: XidInfo("EXCESSIVE_SBE_INTERRUPTS", "info", "none"),
    94: XidInfo("ROBUST_CHANNEL_CONTAINED_ERROR", "app", "restart the application"),
    95: XidInfo("ROBUST_CHANNEL_UNCONTAINED_ERROR", "fatal", "reset the GPU"),
    109: XidInfo("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "fatal", "reset the GPU"),
    119: XidInfo("GSP_RPC_TIMEOUT", "fatal", "reset the GPU"),
    120: XidInfo("GSP_ERROR", "fatal", "reset the GPU"),
    140: XidInfo("UNRECOVERABLE_ECC_ERROR_ESCAPE", "fatal", "reset the GPU"),
}

_TIME = r"(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
    r"(?:\.[0-7])?[^)]*\): (?P<code>\d+)(?:,\s*(?P<rest>.*))?$"
)
_PID = re.compile(r"^pid=(?P<pid>\d+|'?<unknown>'?)\s*,\s*(?:name=(?P<name>[^,]*),\s*)?")


@dataclass(frozen=True)
class XidEvent:
    """One XID line.

    Attributes:
        bus_id: The GPU's PCI address, ``0000:3b:00`` (domain, bus, device).
        code: The XID number.
        time: When it was logged; None when the line carried no zoned time.
        pid: The process the driver named, when one.
        process: Its name, when given.
        message: The rest of the line.
    """

    bus_id: str
    code: int
    time: datetime | None
    pid: int | None
    process: str | None
    message: str


@dataclass(frozen=True)
class XidGroup:
    """Every event of one code on one GPU."""

    bus_id: str
    code: int
    count: int
    first: datetime | None
    last: datetime | None
    last_message: str

    @property
    def info(self) -> XidInfo:
        """What the code means (``unknown`` severity when not in ``XIDS``)."""
        return XIDS.get(
            self.code, XidInfo(f"XID_{self.code}", "unknown", "look it up in the catalog")
        )

    def since_last_s(self, now: datetime) -> float | None:
        """Seconds from the last event to ``now``; None when undated."""
        return None if self.last is None else (now - self.last).total_seconds()


def normalize_bus_id(text: str) -> str:
    """``00000000:3B:00.0`` (NVML) or ``0000:3b:00`` (the log) -> ``0000:3b:00``."""
    parts = text.strip().lower().split(":")
    if len(parts) != 3:
        return text.strip().lower()
    domain, bus, device = parts
    return f"{domain[-4:].rjust(4, '0')}:{bus}:{device.split('.')[0]}"


def parse_xid_events(text: str) -> list[XidEvent]:
    """Every XID line of a kernel log; other lines (and broken ones) are skipped."""
    events = []
    for line in text.splitlines():
        at = line.find("NVRM: Xid")
        if at < 0:
            continue
        match = _XID.search(line[at:].rstrip())
        if match is None:
            continue
        time_match = re.match(_TIME, line.lstrip())
        rest = (match["rest"] or "").strip()
        pid_match = _PID.match(rest)
        pid = process = None
        if pid_match is not None:
            pid = int(pid_match["pid"]) if pid_match["pid"].isdigit() else None
            process = (pid_match["name"] or "").strip() or None
            rest = rest[pid_match.end() :]
        events.append(
            XidEvent(
                bus_id=normalize_bus_id(match["bus"]),
                code=int(match["code"]),
                time=_parse_time(time_match["time"]) if time_match else None,
                pid=pid,
                process=None if process in (None, "<unknown>") else process,
                message=rest.strip(),
            )
        )
    return events


def _parse_time(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text.replace(",", "."))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def group_xids(events: Iterable[XidEvent]) -> list[XidGroup]:
    """Events grouped by GPU and code, in bus then code order."""
    groups: dict[tuple[str, int], list[XidEvent]] = {}
    for event in events:
        groups.setdefault((event.bus_id, event.code), []).append(event)
    out = []
    for (bus, code), found in sorted(groups.items()):
        times = [e.time for e in found if e.time is not None]
        out.append(
            XidGroup(
                bus_id=bus,
                code=code,
                count=len(found),
                first=min(times) if times else None,
                last=max(times) if times else None,
                last_message=found[-1].message,
            )
        )
    return out


def xid_checks(
    node: str,
    groups: Iterable[XidGroup],
    now: datetime,
    gpus: Mapping[str, str] | None = None,
    recent_s: float = RECENT_S,
) -> list[Check]:
    """One ``gpu.xid`` check for the node, naming every GPU and code it saw.

    A fatal code within ``recent_s`` of ``now`` (the node's clock) fails; an older or
    undated fatal code, a recent application fault or an unknown code warns; the
    rest pass (and are listed). The kernel log spans the current boot only.

    Args:
        node: The node's name.
        groups: From ``group_xids``.
        now: The node's time when the log was read (timezone-aware).
        gpus: Bus ID (``normalize_bus_id``) -> a GPU label (``GPU 3``), from NVML.
        recent_s: How long ago still counts as now.
    """
    groups = list(groups)
    worst: Status = "pass"
    parts = []
    for group in groups:
        status = _grade(group, now, recent_s)
        worst = max(worst, status, key=("pass", "warn", "fail").index)
        info = group.info
        where = (gpus or {}).get(group.bus_id, group.bus_id)
        since = group.since_last_s(now)
        when = "undated" if since is None else f"last {_ago(since)} ago"
        parts.append(
            f"{where}: XID {group.code} {info.mnemonic} x{group.count} ({when}; {info.action})"
        )
    return [
        Check(
            "gpu.xid",
            node,
            worst,
            "; ".join(parts) if parts else "no XID in the kernel log since boot",
            f"no fatal XID in the last {_ago(recent_s)}",
            "" if worst == "pass" else _HINT,
        )
    ]


_HINT = (
    "the driver logged GPU errors (journalctl -k | grep Xid): drain the node, act on the "
    "code (reset the GPU with nvidia-smi -r, or reboot), and replace a GPU whose fatal "
    "XIDs come back; see NVIDIA's XID catalog"
)


def _grade(group: XidGroup, now: datetime, recent_s: float) -> Status:
    since = group.since_last_s(now)
    recent = since is None or since <= recent_s
    severity = group.info.severity
    if severity == "fatal":
        return "fail" if since is not None and recent else "warn"
    if severity == "unknown" or (severity == "app" and recent):
        return "warn"
    return "pass"


def _ago(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"
