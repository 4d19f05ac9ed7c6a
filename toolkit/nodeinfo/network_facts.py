"""Typed views of the network facts a node's probe reports (``agent.network_facts``).

The agent sends plain JSON; these classes read it tolerantly (a missing or malformed
field is an absent fact), so the profile logic never handles raw dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Link:
    """A network interface: its MTU, state, speed and, for a bond, its slaves."""

    name: str
    exists: bool
    mtu: int | None
    operstate: str | None
    speed_mbps: int | None
    kind: str | None
    master: str | None
    bond_mode: str | None
    slaves: tuple[Link, ...]

    @property
    def is_bond(self) -> bool:
        """True when the interface is a bonding master."""
        return self.bond_mode is not None or bool(self.slaves)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Link:
        """Read one ``link`` object of the agent's answer."""
        bond = _mapping(data.get("bond"))
        return cls(
            name=str(data.get("name") or "?"),
            exists=bool(data.get("exists", True)),
            mtu=_int(data.get("mtu")),
            operstate=_str(data.get("operstate")),
            speed_mbps=_int(data.get("speed_mbps")),
            kind=_str(data.get("type")),
            master=_str(data.get("master")),
            bond_mode=_str(bond.get("mode")) if data.get("bond") is not None else None,
            slaves=tuple(cls.from_json(_mapping(s)) for s in _list(bond.get("slaves"))),
        )


@dataclass(frozen=True)
class Gid:
    """One populated entry of a port's GID table."""

    index: int
    gid: str
    kind: str | None
    netdev: str | None


@dataclass(frozen=True)
class HcaPort:
    """One port of an RDMA device (HCA), as sysfs shows it."""

    hca: str
    port: int
    state: str | None
    phys_state: str | None
    link_layer: str | None
    rate: str | None
    rate_gbps: float | None
    netdevs: tuple[str, ...]
    gid_netdevs: tuple[str, ...]
    gids: tuple[Gid, ...]
    backs_route: bool
    software: bool

    @property
    def name(self) -> str:
        """``mlx5_0:1``: the form NCCL_IB_HCA takes."""
        return f"{self.hca}:{self.port}"

    @property
    def active(self) -> bool:
        """The port's logical state is ACTIVE."""
        return (self.state or "").upper() == "ACTIVE"

    @property
    def infiniband(self) -> bool:
        """The port runs the InfiniBand link layer."""
        return (self.link_layer or "").lower() == "infiniband"

    @property
    def ethernet(self) -> bool:
        """The port runs the Ethernet link layer (RoCE)."""
        return (self.link_layer or "").lower() == "ethernet"

    @property
    def usable(self) -> bool:
        """Active and on real hardware (software RDMA such as rxe or siw is left out)."""
        return self.active and not self.software

    @property
    def roce_v2(self) -> bool:
        """The port has at least one RoCE v2 GID among those read."""
        return any((g.kind or "").lower() == "roce v2" for g in self.gids)

    def describe(self) -> str:
        """``mlx5_0:1 InfiniBand ACTIVE 200 Gb/sec (4X HDR)``."""
        return " ".join(
            part
            for part in (self.name, self.link_layer or "?", self.state or "?", self.rate)
            if part
        )


@dataclass(frozen=True)
class NetworkFacts:
    """A node's network as its probe saw it.

    Attributes:
        interface: The interface toward the head (or the inventory's ``network.interface``).
        interface_source: ``inventory``, ``route`` or ``head`` (it owns the head address).
        link: The interface's details, when it could be read.
        route_devices: The interface and every device under it (bond slaves, VLAN parent).
        infiniband_class: Whether /sys/class/infiniband exists (RDMA stack loaded).
        ports: Every port of every HCA.
        error: What made the probe give up part way, if anything.
    """

    interface: str | None
    interface_source: str
    link: Link | None
    route_devices: tuple[str, ...]
    infiniband_class: bool
    ports: tuple[HcaPort, ...]
    error: str | None = None

    @property
    def hcas(self) -> tuple[str, ...]:
        """Names of the HCAs found (each once, in sysfs order)."""
        return tuple(dict.fromkeys(p.hca for p in self.ports))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NetworkFacts:
        """Read the agent's ``network`` answer (missing or odd fields become absent)."""
        ports: list[HcaPort] = []
        for hca in _list(data.get("hcas")):
            hca_map = _mapping(hca)
            for port in _list(hca_map.get("ports")):
                ports.append(_port(str(hca_map.get("name") or "?"), hca_map, _mapping(port)))
        link = data.get("link")
        return cls(
            interface=_str(data.get("interface")),
            interface_source=_str(data.get("interface_source")) or "route",
            link=Link.from_json(link) if isinstance(link, Mapping) else None,
            route_devices=tuple(str(d) for d in _list(data.get("route_devices"))),
            infiniband_class=bool(data.get("infiniband")),
            ports=tuple(ports),
            error=_str(data.get("error")),
        )


def _port(hca: str, hca_map: Mapping[str, Any], data: Mapping[str, Any]) -> HcaPort:
    gids = tuple(
        Gid(
            index=_int(g.get("index")) or 0,
            gid=str(g.get("gid") or ""),
            kind=_str(g.get("type")),
            netdev=_str(g.get("ndev")),
        )
        for g in map(_mapping, _list(data.get("gids")))
    )
    rate_gbps = data.get("rate_gbps")
    return HcaPort(
        hca=hca,
        port=_int(data.get("port")) or 1,
        state=_str(data.get("state")),
        phys_state=_str(data.get("phys_state")),
        link_layer=_str(data.get("link_layer")),
        rate=_str(data.get("rate")),
        rate_gbps=float(rate_gbps) if isinstance(rate_gbps, int | float) else None,
        netdevs=tuple(str(n) for n in _list(data.get("netdevs"))),
        gid_netdevs=tuple(str(n) for n in _list(data.get("gid_netdevs"))),
        gids=gids,
        backs_route=bool(data.get("backs_route")),
        software=bool(hca_map.get("software")),
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _str(value: Any) -> str | None:
    return str(value) if value is not None and value != "" else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None
