"""The sandbox's network on the host: a bridge, and per node a netns with a veth pair."""

from __future__ import annotations

import ipaddress
import json
import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import SandboxError
from toolkit.sandbox.names import Layout, NodeLayout

logger = logging.getLogger(__name__)

NETNS_DIR = Path("/run/netns")
# With br_netfilter loaded and this at 1, bridged IPv4 frames pass the host's iptables
# FORWARD chain, whose DROP policy (Docker sets one) would cut nodes off from each other.
BRIDGE_NF_CALL_IPTABLES = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


def ip(*args: str, timeout_s: float = 10.0) -> str:
    """Run ``ip ARGS`` and return its stdout.

    Raises:
        SandboxError: It failed (with ip's own message).
    """
    argv = ["ip", *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SandboxError(f"{' '.join(argv)}: {e}") from e
    if done.returncode != 0:
        raise SandboxError(f"{' '.join(argv)}: {done.stderr.strip() or 'failed'}")
    return done.stdout


@dataclass(frozen=True)
class Link:
    """One interface as ``ip -j link/addr show`` lists it.

    Attributes:
        ifname: Its name.
        addresses: Its addresses as ``ADDRESS/PREFIXLEN`` (``addr show`` only).
    """

    ifname: str
    addresses: tuple[str, ...] = ()


def parse_links(text: str) -> list[Link]:
    """The interfaces in ``ip -j``'s output (none for empty output or another shape).

    An empty object (older iproute2's ``ip -4 -j addr`` has one for each interface
    without an IPv4 address) is no interface.

    Raises:
        SandboxError: An interface has no name, or an address no ``local`` or
            ``prefixlen``.
    """
    data = json.loads(text) if text.strip() else []
    if not isinstance(data, list):
        return []
    links = []
    for entry in data:
        if entry == {}:
            continue
        if not isinstance(entry, dict) or "ifname" not in entry:
            raise SandboxError(f"ip -j: an interface without a name: {entry!r}")
        addresses = []
        for info in entry.get("addr_info") or []:
            if not isinstance(info, dict) or "local" not in info or "prefixlen" not in info:
                raise SandboxError(
                    f"ip -j: {entry['ifname']}: an address without local or prefixlen: {info!r}"
                )
            addresses.append(f"{info['local']}/{info['prefixlen']}")
        links.append(Link(str(entry["ifname"]), tuple(addresses)))
    return links


def _links(*args: str) -> list[Link]:
    return parse_links(ip("-j", *args))


def list_netns() -> list[str]:
    """Names of the network namespaces ``ip netns`` knows."""
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def list_links() -> list[str]:
    """Names of the host's network interfaces."""
    return [link.ifname for link in _links("link", "show")]


def subnet_users(subnet: str) -> list[str]:
    """Host interfaces whose IPv4 networks overlap ``<subnet>.0/24``, as ``ifname addr/len``."""
    ours = ipaddress.ip_network(f"{subnet}.0/24")
    users = []
    for link in _links("-4", "addr", "show"):
        for address in link.addresses:
            iface = ipaddress.ip_interface(address)
            if iface.network.overlaps(ours):
                users.append(f"{link.ifname} {iface}")
    return users


def netns_pids(netns: str) -> list[int]:
    """Host PIDs of the processes in ``netns`` (none when it does not exist)."""
    if not (NETNS_DIR / netns).exists():
        return []
    try:
        return [int(word) for word in ip("netns", "pids", netns).split()]
    except SandboxError:
        return []


def create_bridge(layout: Layout) -> None:
    """Create the bridge with the gateway address, and bring it up."""
    ip("link", "add", layout.bridge, "type", "bridge")
    ip("addr", "add", f"{layout.gateway}/24", "dev", layout.bridge)
    ip("link", "set", layout.bridge, "up")
    logger.info("created bridge %s with %s/24", layout.bridge, layout.gateway)


def create_netns(node: NodeLayout) -> None:
    """Create the node's network namespace with loopback up."""
    ip("netns", "add", node.netns)
    ip("-n", node.netns, "link", "set", "lo", "up")
    logger.info("created netns %s", node.netns)


def connect_node(layout: Layout, node: NodeLayout) -> None:
    """Create the node's veth pair: one end in the bridge, ``eth0`` in its netns."""
    ip("link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
    ip("link", "set", node.veth, "master", layout.bridge, "up")
    ip("-n", node.netns, "addr", "add", f"{node.address}/24", "dev", "eth0")
    ip("-n", node.netns, "link", "set", "eth0", "up")
    ip("-n", node.netns, "route", "add", "default", "via", layout.gateway)
    logger.info("created veth %s <-> %s:eth0 with %s", node.veth, node.netns, node.address)


def delete_link(name: str) -> bool:
    """Delete interface ``name`` (a veth takes its peer along); False when absent."""
    if name not in list_links():
        return False
    ip("link", "del", name)
    logger.info("removed interface %s", name)
    return True


def delete_netns(name: str) -> bool:
    """Delete network namespace ``name``; False when absent."""
    if name not in list_netns():
        return False
    ip("netns", "del", name)
    logger.info("removed netns %s", name)
    return True


def read_sysctl(path: Path) -> str | None:
    """The value of a /proc/sys file, or None when it does not exist."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None


def write_sysctl(path: Path, value: str) -> None:
    """Set a /proc/sys file.

    Raises:
        SandboxError: It cannot be written.
    """
    try:
        path.write_text(value + "\n", encoding="utf-8")
    except OSError as e:
        raise SandboxError(f"cannot set {path} to {value}: {e}") from e
    logger.info("set %s to %s", path, value)
