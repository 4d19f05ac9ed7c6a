"""Pure evaluation of node facts into checks: thresholds and hints live here.

Facts come from ``toolkit/node/facts.py`` run on each node; nothing here touches a
node, so every rule is tested on plain dicts.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolkit.preflight.result import Check, Status

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


def _at_least(value: float, fail_below: float, warn_below: float) -> Status:
    if value < fail_below:
        return "fail"
    return "warn" if value < warn_below else "pass"


def _size(n: float | None) -> str:
    if n is None:
        return "unlimited"
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / MiB:.0f} MiB"


def host_checks(
    node: str, facts: Mapping[str, Any], multi_node: bool, t: Thresholds = Thresholds()
) -> list[Check]:
    """/dev/shm, open files, locked memory, host name resolution and free disk."""
    checks = []
    status: Status
    shm = facts.get("dev_shm_bytes")
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
    nofile = facts.get("nofile")
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
    memlock = facts.get("memlock_bytes")
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
    addresses = [str(a) for a in facts.get("hostname_addresses") or []]
    loopback = [a for a in addresses if _is_loopback(a)]
    status = "fail" if loopback and multi_node else "pass"
    checks.append(
        Check(
            "host.hostname",
            node,
            status,
            f"{facts.get('hostname')} -> {', '.join(addresses) or 'nothing'}",
            "not a loopback address",
            "the host name resolves to loopback (often a 127.0.1.1 line in /etc/hosts): "
            "map it to the node's cluster address, or NCCL and Ray peers connect to themselves",
        )
    )
    free = facts.get("disk_free_bytes")
    if free is not None:
        status = _at_least(free, t.disk_fail_bytes, t.disk_warn_bytes)
        checks.append(
            Check(
                "host.disk_free",
                node,
                status,
                f"{_size(free)} free at {facts.get('disk_path')}",
                f">= {_size(t.disk_warn_bytes)}",
                "checkpoints and traces go to the run directory: free space or choose "
                "another --output-dir",
            )
        )
    return checks


def port_range_check(node: str, facts: Mapping[str, Any], pinned: Mapping[str, int]) -> Check:
    """Pinned Ray ports must stay out of the kernel's ephemeral range."""
    span = facts.get("ephemeral_ports")
    if not span:
        return Check("host.ephemeral_ports", node, "warn", "unknown", "pinned ports outside")
    low, high = int(span[0]), int(span[1])
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


def version_checks(facts: Mapping[str, Mapping[str, Any]]) -> list[Check]:
    """The same Python (major.minor), ray, torch and NCCL everywhere: odd nodes fail."""
    checks = []
    names = ("python", "ray", "torch", "nvidia-nccl-cu12", "nvidia-nccl-cu13")
    for name in names:
        seen = {node: _version(name, f.get("versions", {}).get(name)) for node, f in facts.items()}
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


def reach_checks(src: str, results: Mapping[str, Mapping[str, Any]]) -> list[Check]:
    """One check per target ``dst:port-name`` that ``src`` tried to connect to."""
    checks = []
    for target, result in sorted(results.items()):
        dst, _, port_name = target.partition(":")
        ok = bool(result.get("ok"))
        checks.append(
            Check(
                f"net.port.{port_name}",
                f"{src}->{dst}",
                "pass" if ok else "fail",
                f"{result.get('ms', 0):.1f} ms" if ok else str(result.get("error")),
                "reachable",
                "" if ok else f"open {port_name} on {dst} to the cluster (firewall rules)",
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
