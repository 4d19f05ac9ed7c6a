"""NCCL / Gloo environment profiles: from a node's network facts to variables and reasons.

Pure: ``choose_env`` reads what the node's probe found (``NetworkFacts``) and returns
each variable with the reason it has that value. The rules (DESIGN.md section 7):

- always ``NCCL_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME`` = the interface toward the head;
- ``ib`` / ``roce``: ``NCCL_IB_HCA`` with ``=`` (exact names) listing the active ports,
  ``NCCL_IB_TIMEOUT`` 22, ``NCCL_IB_RETRY_CNT`` 7; ``NCCL_IB_GID_INDEX`` stays unset
  (NCCL >= 2.21 picks the GID, a RoCE v2 one on RoCE);
- ``ethernet``: ``NCCL_NET=Socket`` when no HCA port is usable, and socket threads x
  sockets per thread <= 64, sized by link speed;
- never ``NCCL_P2P_DISABLE``, ``NCCL_SHM_DISABLE`` or ``NCCL_ALGO``, never PyTorch's
  deprecated plain ``NCCL_*`` names (``TORCH_NCCL_*`` are the current ones);
- the inventory's ``network.env`` (and a node's own ``NCCL_*``/``GLOO_*`` env) win.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolkit.errors import NetEnvError
from toolkit.json_types import JsonObject
from toolkit.nodeinfo.network_facts import HcaPort, NetworkFacts

if TYPE_CHECKING:
    from toolkit.inventory import Inventory, Node

PROFILES = ("auto", "ib", "roce", "ethernet")
IB_TIMEOUT = "22"
IB_RETRY_CNT = "7"
OVERRIDE_REASON = "inventory override"
# Never set by a profile (DESIGN.md section 7); an inventory may still set them.
FORBIDDEN = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_ALGO")
# PyTorch's deprecated plain names and the TORCH_NCCL_* names that replace them.
DEPRECATED_NAMES = {
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
    "NCCL_ENABLE_TIMING": "TORCH_NCCL_ENABLE_TIMING",
}
# A node's own env entries with these prefixes count as network overrides.
NETWORK_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_")
ROCE_MIN_MTU = 4200  # below this, RoCE cannot use 4096-byte frames
MAX_SOCKETS = 64  # NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD may not exceed it

_INTERFACE_REASONS = {
    "inventory": "network.interface in the inventory",
    "head": "owns the head's address (this node is the head)",
    "route": "on the route to the head (ip route get)",
}
_DESCRIPTIONS = {
    "auto": "the InfiniBand, RoCE or Ethernet (TCP) variables the node's HCAs call for",
    "ib": "NCCL_IB_HCA (the node's active InfiniBand ports), NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT",
    "roce": "NCCL_IB_HCA (the node's active RoCE ports), NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT",
    "ethernet": "NCCL_NET=Socket (when no HCA is usable), NCCL_SOCKET_NTHREADS and "
    "NCCL_NSOCKS_PERTHREAD by link speed",
}


@dataclass(frozen=True)
class Setting:
    """One variable's value and why it has it."""

    value: str
    reason: str


@dataclass(frozen=True)
class NetEnv:
    """The network environment chosen for one node.

    Attributes:
        requested: The inventory's ``network.profile`` (``auto``, ``ib``, ``roce``, ``ethernet``).
        profile: What it resolved to on this node (never ``auto``).
        profile_reason: Why (what auto detected, or that the inventory asked for it).
        interface: The socket interface (toward the head).
        hca_ports: The HCA ports the profile gives NCCL (``mlx5_0:1``), if any.
        settings: Every variable, in env-file order, with its reason.
        notes: Things worth knowing that set no variable.
    """

    requested: str
    profile: str
    profile_reason: str
    interface: str
    hca_ports: tuple[str, ...]
    settings: Mapping[str, Setting]
    notes: tuple[str, ...] = field(default=())

    @property
    def variables(self) -> dict[str, str]:
        """The variables alone, for the env file."""
        return {key: s.value for key, s in self.settings.items()}

    def to_json(self) -> JsonObject:
        """A JSON-ready dict (``rtk env --json``)."""
        return {
            "requested": self.requested,
            "profile": self.profile,
            "profile_reason": self.profile_reason,
            "interface": self.interface,
            "hca_ports": list(self.hca_ports),
            "variables": {
                k: {"value": s.value, "reason": s.reason} for k, s in self.settings.items()
            },
            "notes": list(self.notes),
        }


def describe_profile(profile: str) -> str:
    """What a profile sets, for ``rtk up --dry-run`` (the values need the node's probe)."""
    what = _DESCRIPTIONS.get(profile, "its variables")
    return (
        f"# + network profile {profile}: {what},\n"
        "#   detected on the node at bring-up; `rtk env INVENTORY` shows them and why"
    )


def inventory_overrides(
    network_env: Mapping[str, str], node_env: Mapping[str, str]
) -> dict[str, str]:
    """The inventory's overrides for one node, in the env file's precedence.

    ``network.env`` first, then the node's own env entries named ``NCCL_*``, ``GLOO_*``
    or ``TORCH_NCCL_*`` (they come later in the env file, so they win).
    """
    merged = dict(network_env)
    merged.update({k: v for k, v in node_env.items() if k.startswith(NETWORK_PREFIXES)})
    return merged


def env_for_node(
    inventory: Inventory, node: Node, facts: Mapping[str, Any] | NetworkFacts
) -> NetEnv:
    """``choose_env`` with the inventory's profile and overrides for ``node``.

    Raises:
        NetEnvError: As ``choose_env``.
    """
    overrides = inventory_overrides(inventory.network.env, node.env)
    return choose_env(inventory.network.profile, facts, overrides, node=node.name)


def choose_env(
    profile: str,
    facts: Mapping[str, Any] | NetworkFacts,
    overrides: Mapping[str, str] | None = None,
    *,
    node: str = "this node",
) -> NetEnv:
    """The NCCL / Gloo variables for a node, each with the reason for its value.

    Args:
        profile: ``auto``, ``ib``, ``roce`` or ``ethernet``.
        facts: The node's network facts (the agent's ``network`` answer, or parsed).
        overrides: Variables from the inventory; they win over everything.
        node: The node's name, for error messages.

    Returns:
        The resolved profile, the variables with their reasons, and notes.

    Raises:
        NetEnvError: Unknown profile; no interface toward the head; ``ib`` (``roce``)
            asked for where no InfiniBand (RoCE) port is active.
    """
    found = facts if isinstance(facts, NetworkFacts) else NetworkFacts.from_json(facts)
    if profile not in PROFILES:
        raise NetEnvError(
            f"{node}: network.profile {profile!r} is not one of {', '.join(PROFILES)}"
        )
    if not found.interface:
        raise NetEnvError(
            f"{node}: no interface toward the head was found; set network.interface "
            "in the inventory"
        )
    resolved, why, ports = _resolve(profile, found, node)
    source = _INTERFACE_REASONS.get(found.interface_source, _INTERFACE_REASONS["route"])
    settings = {
        "GLOO_SOCKET_IFNAME": Setting(found.interface, source),
        "NCCL_SOCKET_IFNAME": Setting(found.interface, source),
    }
    notes: list[str] = []
    if resolved == "ethernet":
        settings.update(_ethernet(found, notes))
    else:
        settings.update(_rdma(resolved, found, ports, notes))
    for key, value in (overrides or {}).items():
        settings[key] = Setting(value, OVERRIDE_REASON)
        if key in FORBIDDEN:
            notes.append(f"{key} comes from the inventory; rtk never sets it itself")
        if key in DEPRECATED_NAMES:
            notes.append(f"{key} is PyTorch's deprecated name; write {DEPRECATED_NAMES[key]}")
    if found.error:
        notes.append(f"the probe read only part of the network: {found.error}")
    return NetEnv(
        requested=profile,
        profile=resolved,
        profile_reason=why,
        interface=found.interface,
        hca_ports=tuple(p.name for p in ports),
        settings=settings,
        notes=tuple(notes),
    )


def _resolve(profile: str, facts: NetworkFacts, node: str) -> tuple[str, str, list[HcaPort]]:
    """The profile this node gets, why, and the HCA ports it gives NCCL."""
    ib = [p for p in facts.ports if p.usable and p.infiniband]
    roce = [p for p in facts.ports if p.usable and p.ethernet]
    asked = "asked for in the inventory (network.profile)"
    if profile in ("ib", "roce"):
        ports = ib if profile == "ib" else roce
        if not ports:
            kind = "InfiniBand" if profile == "ib" else "RoCE (Ethernet link layer)"
            raise NetEnvError(
                f"{node}: network.profile is {profile}, but no {kind} port is active there; "
                f"found {found_text(facts)}; use profile auto, or fix the ports"
            )
        return profile, asked, ports
    if profile == "ethernet":
        return "ethernet", asked, []
    if ib:
        return "ib", f"auto: active InfiniBand port(s) {_names(ib)}", ib
    if roce:
        backing = [p for p in roce if p.backs_route]
        where = (
            f"{_names(backing)} back(s) {facts.interface}, the interface toward the head"
            if backing
            else f"not under {facts.interface}, but NCCL reaches peers over them by RDMA"
        )
        return "roce", f"auto: active RoCE port(s) {_names(roce)} ({where})", roce
    return "ethernet", f"auto: no active InfiniBand or RoCE port; found {found_text(facts)}", []


def found_text(facts: NetworkFacts) -> str:
    """What the node's RDMA side looks like, in a few words (for reasons and errors)."""
    if not facts.infiniband_class:
        return "no RDMA devices, no /sys/class/infiniband"
    if not facts.ports:
        return "no HCA ports under /sys/class/infiniband"
    return ", ".join(
        p.describe() + (" (software RDMA, not used)" if p.software else "") for p in facts.ports
    )


def _rdma(
    profile: str, facts: NetworkFacts, ports: list[HcaPort], notes: list[str]
) -> dict[str, Setting]:
    kind = "InfiniBand" if profile == "ib" else "RoCE"
    left_out = [p for p in facts.ports if p not in ports]
    hca_reason = f"exact (=) names of the active {kind} ports"
    if left_out:
        hca_reason += "; left out: " + ", ".join(
            f"{p.name} ({p.state or '?'}, {p.link_layer or '?'})" for p in left_out
        )
    gid = "a RoCE v2 GID" if profile == "roce" else "the GID"
    notes.append(f"NCCL_IB_GID_INDEX left unset: NCCL >= 2.21 picks {gid} itself")
    if profile == "roce":
        no_v2 = [p.name for p in ports if p.gids and not p.roce_v2]
        if no_v2:
            notes.append(f"no RoCE v2 GID found on {', '.join(no_v2)} (checked the first ones)")
        mtu = facts.link.mtu if facts.link else None
        if mtu is not None and mtu < ROCE_MIN_MTU:
            notes.append(
                f"MTU {mtu} on {facts.interface} limits RoCE to small frames; "
                f"{ROCE_MIN_MTU} or more (9000) lets it use 4096-byte ones"
            )
    return {
        "NCCL_IB_HCA": Setting("=" + ",".join(p.name for p in ports), hca_reason),
        "NCCL_IB_TIMEOUT": Setting(
            IB_TIMEOUT,
            "IB retransmit timeout 4.096 us x 2^22 = 17 s: rides out short fabric stalls "
            "(DESIGN.md: 20-22)",
        ),
        "NCCL_IB_RETRY_CNT": Setting(
            IB_RETRY_CNT,
            "retransmissions before NCCL reports an IB error (7, the hardware maximum)",
        ),
    }


def _ethernet(facts: NetworkFacts, notes: list[str]) -> dict[str, Setting]:
    settings: dict[str, Setting] = {}
    usable = [p for p in facts.ports if p.usable]
    if usable:
        notes.append(
            f"NCCL_NET left unset: {_names(usable)} active, so NCCL may still use RDMA; "
            "set network.env NCCL_NET: Socket to force TCP"
        )
    else:
        settings["NCCL_NET"] = Setting("Socket", "no active InfiniBand or RoCE port: NCCL uses TCP")
    speed_mbps = facts.link.speed_mbps if facts.link else None
    threads, per_thread, why = socket_threads(speed_mbps)
    total = f"{threads} threads x {per_thread} sockets = {threads * per_thread} (<= {MAX_SOCKETS})"
    settings["NCCL_SOCKET_NTHREADS"] = Setting(str(threads), f"{total}: {why}")
    settings["NCCL_NSOCKS_PERTHREAD"] = Setting(str(per_thread), f"{total}: {why}")
    return settings


def socket_threads(speed_mbps: int | None) -> tuple[int, int, str]:
    """NCCL socket threads and sockets per thread for a link speed, and why."""
    if speed_mbps is None:
        return 2, 2, "link speed unknown"
    gbps = f"{speed_mbps / 1000:g} Gb/s link"
    if speed_mbps >= 100_000:
        return 4, 4, f"{gbps}: NCCL's suggestion for 100G networks"
    if speed_mbps >= 25_000:
        return 2, 4, f"{gbps}: enough streams to fill it"
    return 2, 2, f"{gbps}: a few streams fill it"


def _names(ports: list[HcaPort]) -> str:
    return ", ".join(p.name for p in ports)
