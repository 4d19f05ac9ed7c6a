"""``rtk env`` as text: per node, what was detected and each variable with its reason."""

from __future__ import annotations

from toolkit.netenv.detect import NetworkReport, NodeNetwork
from toolkit.netenv.profiles import found_text
from toolkit.nodeinfo.network_facts import HcaPort, Link, NetworkFacts
from toolkit.nodeinfo.probe import RouteFacts

_SOURCES = {
    "inventory": "network.interface in the inventory",
    "head": "owns the head's address",
    "route": "on the route to the head",
}


def render_network(report: NetworkReport) -> str:
    """The whole report: a header line, then one block per node."""
    ok = len(report.nodes) - len(report.failed)
    lines = [
        f"cluster {report.cluster}: network profile {report.profile}; {ok}/{len(report.nodes)} "
        f"node(s) settled, probed in {report.duration_s:.1f} s"
    ]
    for node in report.nodes:
        lines += ["", *render_node(node)]
    return "\n".join(lines) + "\n"


def render_node(node: NodeNetwork) -> list[str]:
    """One node's block."""
    lines = [f"[{node.name}] {node.role} at {node.address}"]
    facts = node.facts
    if facts is not None:
        lines += _detected(node, facts)
    if node.error:
        lines.append(f"  error      {node.error}")
    env = node.env
    if env is None:
        return lines
    lines.append(f"  profile    {env.profile} ({env.profile_reason})")
    lines.append("  variables")
    width = max(len(f"{k}={s.value}") for k, s in env.settings.items())
    for key, setting in env.settings.items():
        lines.append(f"    {f'{key}={setting.value}':<{width}}  {setting.reason}")
    if env.notes:
        lines.append("  notes")
        lines += [f"    - {note}" for note in env.notes]
    return lines


def _detected(node: NodeNetwork, facts: NetworkFacts) -> list[str]:
    source = _SOURCES.get(facts.interface_source, facts.interface_source)
    route = node.route or RouteFacts()
    ip = route.source_ip or "?"
    head = route.head_ip or "?"
    lines = [f"  route      {facts.interface or '?'} ({source}), source {ip}, head {head}"]
    if facts.link is not None:
        lines.append(f"  interface  {_link(facts.link)}")
        lines.append(f"  bonding    {_bonding(facts.link)}")
    if not facts.ports:
        lines.append(f"  HCAs       none: {found_text(facts)}")
    else:
        lines.append("  HCAs")
        lines += [f"    {_port(p)}" for p in facts.ports]
    return lines


def _link(link: Link) -> str:
    if not link.exists:
        return f"{link.name}: not found under /sys/class/net"
    parts = [
        link.kind or "?",
        link.operstate or "?",
        f"mtu {link.mtu}" if link.mtu is not None else "mtu ?",
        f"{link.speed_mbps} Mb/s" if link.speed_mbps else "speed unknown",
    ]
    return f"{link.name}: {', '.join(parts)}"


def _bonding(link: Link) -> str:
    if link.is_bond:
        slaves = ", ".join(_link(s) for s in link.slaves) or "no slaves"
        return f"{link.name} is a bond ({link.bond_mode or '?'}) over {slaves}"
    if link.master:
        return f"{link.name} is a slave of {link.master}"
    return "none"


def _port(port: HcaPort) -> str:
    parts = [
        port.name,
        port.link_layer or "?",
        port.state or "?",
        f"({port.phys_state})" if port.phys_state else "",
        port.rate or "rate ?",
        f"netdev {','.join(port.netdevs)}" if port.netdevs else "no netdev",
    ]
    if port.gid_netdevs and set(port.gid_netdevs) != set(port.netdevs):
        parts.append(f"GIDs on {','.join(port.gid_netdevs)}")
    if port.ethernet and port.gids:
        parts.append("RoCE v2" if port.roce_v2 else "no RoCE v2 GID")
    if port.software:
        parts.append("software RDMA")
    if port.backs_route:
        parts.append("<- backs the route")
    return "  ".join(p for p in parts if p)
