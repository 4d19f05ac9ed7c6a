"""Pure evaluation of node facts into checks: thresholds and hints live here.

Facts come from ``toolkit/node/facts.py`` run on each node, read into the typed
records of ``toolkit.nodeinfo.host_facts``; nothing here touches a node, so every rule is
tested on records built in the test. The GPU checks are in ``gpu_checks``.
"""

from __future__ import annotations

import ipaddress
import statistics
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from toolkit.preflight.bandwidth.job_result import AllreduceResult, BandwidthResult, TcpPair
from toolkit.preflight.bandwidth.localise_section import LocaliseSection
from toolkit.preflight.localise.culprit_checks import localise_checks
from toolkit.preflight.result import Check, Status

if TYPE_CHECKING:  # only for types: the bandwidth job (a Ray job driver) imports this module
    from toolkit.nodeinfo.host_facts import HostFacts, SoftwareFacts

GiB = 1024**3
MiB = 1024**2


@dataclass(frozen=True)
class Thresholds:
    """What counts as good; the defaults suit GPU training nodes."""

    dev_shm_fail_bytes: int = 512 * MiB
    dev_shm_warn_bytes: int = 2 * GiB
    nofile_fail: int = 4096
    nofile_warn: int = 65536
    disk_fail_bytes: int = 1 * GiB
    disk_warn_bytes: int = 10 * GiB
    clock_warn_s: float = 0.5
    clock_fail_s: float = 5.0
    # --bandwidth: a pair fails below the absolute floor, or below this fraction of the
    # median pair (one slow link among healthy ones); 0 turns a floor off.
    tcp_min_gbit_s: float = 0.0
    tcp_min_fraction: float = 0.5
    busbw_min_gb_s: float = 0.0


def _at_least(value: float, fail_below: float, warn_below: float) -> Status:
    if value < fail_below:
        return "fail"
    return "warn" if value < warn_below else "pass"


def _size(n: float | None) -> str:
    if n is None:
        return "unlimited"
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / MiB:.0f} MiB"


def host_checks(
    node: str, facts: HostFacts, multi_node: bool, t: Thresholds = Thresholds()
) -> list[Check]:
    """/dev/shm, open files, locked memory, host name resolution and free disk."""
    checks = []
    status: Status
    shm = facts.dev_shm_bytes
    if shm is None:
        checks.append(Check("host.dev_shm", node, "fail", "no /dev/shm", ">= 2 GiB"))
    else:
        status = _at_least(shm, t.dev_shm_fail_bytes, t.dev_shm_warn_bytes)
        checks.append(
            Check(
                "host.dev_shm",
                node,
                status,
                _size(shm),
                f">= {_size(t.dev_shm_warn_bytes)}",
                "NCCL and Ray's object store live in /dev/shm: remount it larger "
                "(mount -o remount,size=16G /dev/shm; in Docker: --shm-size)",
            )
        )
    nofile = facts.nofile
    status = "pass" if nofile is None else _at_least(nofile, t.nofile_fail, t.nofile_warn)
    checks.append(
        Check(
            "host.ulimit_nofile",
            node,
            status,
            "unlimited" if nofile is None else str(nofile),
            f">= {t.nofile_warn}",
            "raise the open-files limit (ulimit -n, limits.conf nofile) before starting Ray",
        )
    )
    memlock = facts.memlock_bytes
    checks.append(
        Check(
            "host.ulimit_memlock",
            node,
            "pass" if memlock is None else "warn",
            _size(memlock),
            "unlimited",
            "RDMA (InfiniBand/RoCE) needs unlimited locked memory: ulimit -l unlimited",
        )
    )
    addresses = list(facts.hostname_addresses)
    loopback = [a for a in addresses if _is_loopback(a)]
    status = "fail" if loopback and multi_node else "pass"
    checks.append(
        Check(
            "host.hostname",
            node,
            status,
            f"{facts.hostname} -> {', '.join(addresses) or 'nothing'}",
            "not a loopback address",
            "the host name resolves to loopback (often a 127.0.1.1 line in /etc/hosts): "
            "map it to the node's cluster address, or NCCL and Ray peers connect to themselves",
        )
    )
    free = facts.disk_free_bytes
    if free is not None:
        status = _at_least(free, t.disk_fail_bytes, t.disk_warn_bytes)
        checks.append(
            Check(
                "host.disk_free",
                node,
                status,
                f"{_size(free)} free at {facts.disk_path}",
                f">= {_size(t.disk_warn_bytes)}",
                "checkpoints and traces go to the run directory: free space or choose "
                "another --output-dir",
            )
        )
    return checks


def port_range_check(node: str, facts: HostFacts, pinned: Mapping[str, int]) -> Check:
    """Pinned Ray ports must stay out of the kernel's ephemeral range."""
    span = facts.ephemeral_ports
    if not span:
        return Check("host.ephemeral_ports", node, "warn", "unknown", "pinned ports outside")
    low, high = span
    inside = sorted(f"{name} {port}" for name, port in pinned.items() if low <= port <= high)
    return Check(
        "host.ephemeral_ports",
        node,
        "fail" if inside else "pass",
        f"{low}-{high}" + (f"; inside it: {', '.join(inside)}" if inside else ""),
        "pinned ports outside the range",
        "an outgoing connection can take a pinned port first: move the ports (inventory "
        "ports:) or narrow net.ipv4.ip_local_port_range",
    )


def version_checks(software: Mapping[str, SoftwareFacts]) -> list[Check]:
    """The same Python (major.minor), ray, torch and NCCL everywhere: odd nodes fail."""
    checks = []
    names = ("python", "ray", "torch", "nvidia-nccl-cu12", "nvidia-nccl-cu13")
    for name in names:
        seen = {node: _version(name, s.version(name)) for node, s in software.items()}
        if all(v is None for v in seen.values()):
            continue
        common, _ = Counter(seen.values()).most_common(1)[0]
        for node, version in seen.items():
            ok = version == common
            checks.append(
                Check(
                    f"software.{name}",
                    node,
                    "pass" if ok else "fail",
                    version or "missing",
                    f"{common or 'missing'} (as on the other nodes)",
                    f"install the same {name} on every node (the inventory's python/venv)",
                )
            )
    return checks


def clock_checks(
    offsets: Mapping[str, tuple[float, float]], head: str, t: Thresholds = Thresholds()
) -> list[Check]:
    """Each node's clock against the head's: ``offsets`` maps node -> (offset_s, error_s)."""
    if head not in offsets:
        return []
    base, base_err = offsets[head]
    checks = []
    for node, (offset, err) in offsets.items():
        if node == head:
            continue
        skew = abs(offset - base)
        margin = err + base_err
        status = _at_least(-(skew - margin), -t.clock_fail_s, -t.clock_warn_s)
        checks.append(
            Check(
                "host.clock_offset",
                node,
                status,
                f"{offset - base:+.3f} s vs {head} (+/- {margin:.3f})",
                f"within {t.clock_warn_s:g} s",
                "run chrony or ntpd on every node; power traces are aligned by clock offsets",
            )
        )
    return checks


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def _version(name: str, version: str | None) -> str | None:
    if version and name == "python":
        return ".".join(version.split(".")[:2])
    return version


def tcp_floor_gbit_s(tcp: Sequence[TcpPair], t: Thresholds = Thresholds()) -> float:
    """The rate below which a pair fails: the absolute floor or a share of the median."""
    rates = sorted(r.gbit_s for r in tcp if r.gbit_s is not None)
    median = statistics.median(rates) if rates else 0.0
    return max(t.tcp_min_gbit_s, t.tcp_min_fraction * median)


def slow_pairs(tcp: Sequence[TcpPair], t: Thresholds = Thresholds()) -> set[tuple[str, str]]:
    """``(src, dst)`` of the pairs that failed to connect or fell below the floor."""
    floor = tcp_floor_gbit_s(tcp, t)
    return {r.key for r in tcp if r.gbit_s is None or r.gbit_s < floor}


def bandwidth_checks(result: BandwidthResult, t: Thresholds = Thresholds()) -> list[Check]:
    """TCP per pair of the ring and the all-reduce sweep (``bandwidth.job``'s result)."""
    checks = []
    tcp = result.tcp
    floor = tcp_floor_gbit_s(tcp, t)
    slow = slow_pairs(tcp, t)
    cleared = cleared_pairs(slow, result.localise.get("tcp") or LocaliseSection())
    for r in tcp:
        pair = f"{r.src}->{r.dst}"
        tries = f" (best of {r.attempts})" if r.attempts > 1 else ""
        measured = f"{r.gbit_s:.2f} Gbit/s" if r.gbit_s is not None else str(r.error)
        status: Status = "fail" if r.key in slow else "pass"
        if r.key in cleared:
            status, tries = "warn", f"{tries}, fine when localisation measured it again"
        checks.append(
            Check(
                "net.bandwidth.tcp",
                pair,
                status,
                measured + tries,
                f">= {floor:.2f} Gbit/s"
                + (f" ({t.tcp_min_fraction:g} x the median pair)" if t.tcp_min_fraction else ""),
                "a slow or lossy link between these two nodes: check the cable/port, "
                "its negotiated speed (ethtool), errors (ip -s link), and traffic shaping (tc)",
            )
        )
    for node in result.missing:
        checks.append(
            Check(
                "net.bandwidth.tcp",
                node,
                "fail",
                "not in Ray",
                "Ray up on the node",
                "bandwidth is measured between Ray nodes: rtk up, then rtk status",
            )
        )
    if result.allreduce is not None:
        checks.append(_allreduce_check(result.allreduce, t))
    return checks + localise_checks(result.localise)


def cleared_pairs(
    slow: Collection[tuple[str, str]], found: LocaliseSection
) -> set[tuple[str, str]]:
    """The ring's slow pairs that localisation measured fine again and blamed no one for.

    A pair stays failed when either end, or the link between them, is a culprit, or
    when no test of localisation holding both ends came out good: a slow pair is only
    forgiven on the evidence of a later good measurement (a flake on a busy node).
    """
    blamed = {n for c in found.culprits for n in c.nodes}
    good = [set(r.group) for r in found.readings if r.bad is False]
    return {
        (src, dst)
        for src, dst in slow
        if src not in blamed and dst not in blamed and any({src, dst} <= g for g in good)
    }


def _mib(size_bytes: float) -> str:
    size = float(size_bytes)
    return f"{size / GiB:g} GiB" if size >= GiB else f"{size / MiB:g} MiB"


def _allreduce_check(reduce: AllreduceResult, t: Thresholds) -> Check:
    backend, ranks = reduce.backend, reduce.ranks
    name = "net.bandwidth.allreduce"
    if ranks < 2:
        return Check(name, "cluster", "pass", f"{ranks} rank: skipped", ">= 2 ranks")
    largest = reduce.largest
    if reduce.error is not None or largest is None:
        return Check(
            name,
            "cluster",
            "fail",
            f"{backend}, {ranks} ranks: {reduce.error}",
            "completes",
            "the collective failed: check NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME (rtk env) "
            "and that every node reaches the others on high ports",
        )
    value = largest.busbw_gb_s
    # the threshold, or the least the hardware should reach where the job was told
    floor = max(t.busbw_min_gb_s, reduce.expected_min_gb_s or 0.0)
    flat = reduce.plateau
    flat_text = (
        f"; plateau from {_mib(flat.size_bytes)} (within 10% of the best, "
        f"{flat.best_gb_s:.3f} GB/s)"
        if flat
        else ""
    )
    return Check(
        name,
        "cluster",
        "fail" if value < floor else "pass",
        f"busbw {value:.3f} GB/s, algbw {largest.algbw_gb_s:.3f} GB/s at "
        f"{_mib(largest.size_bytes)} ({backend}, {ranks} ranks){flat_text}",
        f">= {floor:g} GB/s busbw",
        "below what the fabric should carry: run rtk env to see the NCCL transport chosen, "
        "and nccl-tests for detail",
    )
