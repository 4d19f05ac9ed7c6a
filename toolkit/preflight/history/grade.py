"""A node's error history, graded: kernel-log XIDs, DCGM diagnostics and RDMA ports.

``facts.py`` sends the raw text (``NodeFacts.kernel_log``, ``.dcgm``, ``.ib_ports``);
``history_checks`` parses it with ``errlog``, ``dcgm`` and ``ib_ports`` and grades it
against a ``HistoryExpectation`` (``expectation_for`` builds one from the inventory).
A source that does not apply gives no check at all: no XID or DCGM check on a node
with no GPU (none seen by NVML, none in the inventory), no port check on a node with
no RDMA device where none is expected, no DCGM check unless a level was asked for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from toolkit.inventory import Inventory, Node
from toolkit.netenv.profiles import inventory_overrides
from toolkit.nodeinfo.history_facts import DcgmFacts
from toolkit.nodeinfo.host_facts import NodeFacts
from toolkit.preflight.history.dcgm import DcgmDiag, dcgm_checks, parse_dcgm_diag
from toolkit.preflight.history.errlog import (
    RECENT_S,
    group_xids,
    normalize_bus_id,
    parse_xid_events,
    xid_checks,
)
from toolkit.preflight.history.ib_ports import IbPort, PortExpectation, parse_ports, port_checks
from toolkit.rundir.preflight import Check

# What ``facts.py`` gives ``dcgmi diag -r LEVEL`` (its ``DCGM_TIMEOUT_S``); the
# transport's limit for the facts command grows by as much.
DCGM_TIMEOUT_S: Mapping[int, float] = {1: 120.0, 2: 600.0}
DCGM_LEVELS = (0, 1, 2)


@dataclass(frozen=True)
class HistoryExpectation:
    """What one node's error history is graded against.

    Attributes:
        gpus: GPUs the inventory expects on the node (XIDs and DCGM apply to a node
            with GPUs: this many, or any that NVML sees).
        dcgm_level: The ``dcgmi diag`` level asked for (0: none).
        ports: What the node's RDMA ports should show; None: nothing is expected,
            and ports that exist are graded on state, physical state and errors only.
        hca_prefixes: ``ports.hcas`` are NCCL_IB_HCA prefixes (``mlx5`` matches
            ``mlx5_0``), not exact names.
        recent_s: How long ago a fatal XID still fails the node.
    """

    gpus: int = 0
    dcgm_level: int = 0
    ports: PortExpectation | None = None
    hca_prefixes: bool = False
    recent_s: float = RECENT_S


def dcgm_timeout_s(level: int) -> float:
    """How long the node may spend on ``dcgmi diag -r level`` (0 for level 0)."""
    return 0.0 if level <= 0 else DCGM_TIMEOUT_S.get(level, max(DCGM_TIMEOUT_S.values()))


def expectation_for(inventory: Inventory, node: Node, dcgm_level: int = 0) -> HistoryExpectation:
    """The expectation for ``node``: its GPUs, and the network profile's RDMA ports.

    ``network.profile`` ``ib`` or ``roce`` expects at least one ACTIVE port of that
    link layer; ``NCCL_IB_HCA`` (``network.env`` or the node's env, as the env file
    gives it) names the ports in use, which must then be up. ``auto`` and
    ``ethernet`` expect nothing.
    """
    env = inventory_overrides(inventory.network.env, node.env)
    ports, prefixes = port_expectation(inventory.network.profile, env.get("NCCL_IB_HCA"))
    return HistoryExpectation(
        gpus=node.gpus, dcgm_level=dcgm_level, ports=ports, hca_prefixes=prefixes
    )


def port_expectation(
    profile: str, nccl_ib_hca: str | None = None
) -> tuple[PortExpectation | None, bool]:
    """The ports expected for a network profile and an ``NCCL_IB_HCA`` value.

    Returns:
        The expectation (None: none), and whether its HCA names are prefixes
        (NCCL's default; ``=`` makes them exact; a ``^`` list excludes, and names
        no port in use here).
    """
    text = (nccl_ib_hca or "").strip()
    exact = text.startswith("=")
    hcas: tuple[str, ...] = ()
    if text and not text.startswith("^"):
        hcas = tuple(h.strip() for h in text.lstrip("=").split(",") if h.strip())
    if profile in ("ib", "roce"):
        layer = "InfiniBand" if profile == "ib" else "Ethernet"
        return PortExpectation(label=profile, link_layer=layer, hcas=hcas, min_ports=1), not exact
    if hcas:
        return PortExpectation(label="NCCL_IB_HCA", hcas=hcas), not exact
    return None, False


def history_checks(node: str, facts: NodeFacts, expect: HistoryExpectation) -> list[Check]:
    """The node's error-history checks, each only where its source applies.

    ``gpu.xid`` and ``gpu.dcgm_diag`` on a node with GPUs, ``net.ib_port`` per RDMA
    port and ``net.ib_ports`` (``ib_ports.port_checks``); see the module's docstring.
    """
    has_gpus = facts.gpus.available or facts.gpus.count > 0 or expect.gpus > 0
    return [
        *_xid_checks(node, facts, expect, has_gpus),
        *(_dcgm_checks(node, facts, expect) if has_gpus else []),
        *_port_checks(node, facts, expect),
    ]


def _xid_checks(
    node: str, facts: NodeFacts, expect: HistoryExpectation, has_gpus: bool
) -> list[Check]:
    log = facts.kernel_log
    if log is None or not (has_gpus or log.xid_lines):
        return []
    if log.source is None:
        return [
            Check(
                "gpu.xid",
                node,
                "warn",
                f"could not read the kernel log: {log.error or 'no source answered'}",
                "the kernel log readable (journalctl -k or dmesg)",
                "rtk reads the kernel log as the node's user: add it to the systemd-journal "
                "(or adm) group, or allow dmesg (sysctl kernel.dmesg_restrict=0)",
            )
        ]
    labels = {
        normalize_bus_id(d.pci_bus_id): f"GPU {'?' if d.index is None else d.index}"
        for d in facts.gpus.devices
        if d.pci_bus_id
    }
    groups = group_xids(parse_xid_events("\n".join(log.xid_lines)))
    now = datetime.fromtimestamp(facts.wall_s, UTC)
    checks = xid_checks(node, groups, now, labels, expect.recent_s)
    kept = f"; the last {len(log.xid_lines)} of {log.xid_lines_total} XID lines"
    note = f" (from {log.source}{kept if log.truncated else ''})"
    return [dataclasses.replace(c, measured=c.measured + note) for c in checks]


def _dcgm_checks(node: str, facts: NodeFacts, expect: HistoryExpectation) -> list[Check]:
    run = facts.dcgm
    level = run.level if run is not None else expect.dcgm_level
    if level <= 0:
        return []
    if run is None:
        return dcgm_checks(node, DcgmDiag(None, (), "the node sent no DCGM answer"), level)
    if not run.available:
        return [
            Check(
                "gpu.dcgm_diag",
                node,
                "warn",
                f"dcgmi not found on the node's PATH (--dcgm-level {level} asks for it)",
                f"dcgmi diag -r {level}: no failed test",
                "install DCGM (datacenter-gpu-manager) and start nv-hostengine on the "
                "node, or run preflight with --dcgm-level 0",
            )
        ]
    return dcgm_checks(node, _diag(run), level)


def _diag(run: DcgmFacts) -> DcgmDiag:
    if run.error:
        return DcgmDiag(None, (), run.error)
    text = run.output.strip()
    if text.startswith("{"):
        return parse_dcgm_diag(text)
    said = " ".join((text or run.stderr or "no output").split())
    said = said if len(said) <= 160 else said[:157] + "..."
    return DcgmDiag(None, (), f"dcgmi diag -r {run.level} exited {run.exit_code}: {said}")


def _port_checks(node: str, facts: NodeFacts, expect: HistoryExpectation) -> list[Check]:
    ports = parse_ports(facts.ib_ports or {})
    if expect.ports is None:
        return port_checks(node, ports, PortExpectation()) if ports else []
    wanted = expect.ports
    if expect.hca_prefixes and wanted.hcas:
        wanted = dataclasses.replace(wanted, hcas=_expand(wanted.hcas, ports))
    return port_checks(node, ports, wanted)


def _expand(names: Sequence[str], ports: Sequence[IbPort]) -> tuple[str, ...]:
    """NCCL_IB_HCA prefixes -> the ports they match (``mlx5:1`` -> ``mlx5_0:1``...).

    A name that matches no port stays, so the check names it as missing.
    """
    out: list[str] = []
    for name in names:
        hca, _, number = name.partition(":")
        found = [
            p.name
            for p in ports
            if p.hca.startswith(hca) and (not number or str(p.port) == number.strip())
        ]
        out += found or [name]
    return tuple(dict.fromkeys(out))
