"""What sandboxes exist on this machine, and how each node of one is doing."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from toolkit.errors import SandboxError
from toolkit.json_types import JsonObject
from toolkit.sandbox import network, procs
from toolkit.sandbox.names import (
    DIR_PREFIX,
    RECORD_FILE,
    ROOT,
    Layout,
    bridge_name,
    netns_pattern,
    sandbox_dir,
    validate_name,
)
from toolkit.sandbox.sandbox_json import SandboxRecord
from toolkit.sandbox.slurm import daemons as slurm_daemons
from toolkit.sandbox.slurm.conf import SlurmLayout
from toolkit.sandbox.ssh_login import port_open


def list_sandboxes() -> list[str]:
    """Names of the sandboxes that have a directory on this machine."""
    return sorted(
        p.name.removeprefix(DIR_PREFIX)
        for p in ROOT.glob(f"{DIR_PREFIX}*")
        if p.is_dir() and (p / RECORD_FILE).exists()
    )


@dataclass(frozen=True)
class NodeStatus:
    """One node as seen from the host now.

    Attributes:
        name: Host name.
        address: IPv4 address.
        netns: Network namespace.
        init_pid: Host PID of its init, when recorded.
        running: Its init is alive (PID 1 of a namespace, inside its netns).
        sshd_listening: Port 22 at its address accepts TCP connections from the host.
    """

    name: str
    address: str
    netns: str | None
    init_pid: int | None
    running: bool
    sshd_listening: bool


@dataclass(frozen=True)
class SlurmStatus:
    """A sandbox's SLURM as seen from the host now.

    Attributes:
        munged_pid: PID of its live munged, or None.
        slurmctld_pid: PID of its live slurmctld, or None.
        nodes: Each node's state as ``sinfo`` reports it (``idle``, ``down*``, ...).
        error: Why ``sinfo`` gave no states, when it did not.
    """

    munged_pid: int | None
    slurmctld_pid: int | None
    nodes: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    @property
    def healthy(self) -> bool:
        """Both daemons run and every node can take jobs."""
        return bool(
            self.munged_pid
            and self.slurmctld_pid
            and self.nodes
            and all(state in slurm_daemons.READY_STATES for state in self.nodes.values())
        )


def slurm_status(record: SandboxRecord) -> SlurmStatus:
    """The SLURM daemons of the sandbox in ``record`` and its node states."""
    layout = SlurmLayout.of(Layout.build(record.name, record.subnet, len(record.nodes)))
    daemons = {
        p: pid for pid, p in slurm_daemons.find_daemons(Path(record.directory), record).items()
    }
    slurmctld = daemons.get("slurmctld")
    states: dict[str, str] = {}
    error = None
    if slurmctld is None:
        error = "slurmctld is not running"
    else:
        try:
            states = slurm_daemons.node_states(layout.conf, timeout_s=10.0)
        except SandboxError as e:
            error = str(e)
    return SlurmStatus(daemons.get("munged"), slurmctld, states, error)


@dataclass(frozen=True)
class SandboxStatus:
    """A sandbox as seen from the host now.

    Attributes:
        name: Sandbox name.
        directory: Its directory.
        subnet: Its /24 as three octets.
        bridge: Its bridge, or None when it does not exist (any more).
        inventory: Its inventory file, or None when not written (yet).
        nodes: Each node's status.
        leftovers: Namespaces or interfaces of this name that its record does not list.
        slurm: Its SLURM, when it was created with SLURM.
    """

    name: str
    directory: str
    subnet: str
    bridge: str | None
    inventory: str | None
    nodes: list[NodeStatus] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    slurm: SlurmStatus | None = None

    @property
    def healthy(self) -> bool:
        """Every node runs and its sshd listens (and, with SLURM, takes jobs)."""
        nodes_ok = bool(self.nodes) and all(n.running and n.sshd_listening for n in self.nodes)
        return nodes_ok and (self.slurm is None or self.slurm.healthy)

    def to_json(self) -> JsonObject:
        """Plain data, for ``--json``."""
        data = {**asdict(self), "healthy": self.healthy}
        if self.slurm is not None:
            data["slurm"]["healthy"] = self.slurm.healthy
        return data


def sandbox_status(name: str) -> SandboxStatus:
    """How sandbox ``name`` is doing, from its record and the live system.

    Raises:
        SandboxError: No sandbox of that name has a record here.
    """
    directory = sandbox_dir(validate_name(name))
    record_path = directory / RECORD_FILE
    if not record_path.exists():
        others = ", ".join(list_sandboxes()) or "none"
        raise SandboxError(f"no sandbox named {name} on this machine (sandboxes here: {others})")
    record = SandboxRecord.load(record_path)
    links = network.list_links()
    nodes = []
    for n in record.nodes:
        running = bool(n.init_pid and n.netns and procs.is_node_init(n.init_pid, n.netns))
        listening = running and port_open(n.address, 22, timeout_s=0.5)
        nodes.append(NodeStatus(n.name, n.address, n.netns, n.init_pid, running, listening))
    known = {n.netns for n in record.nodes}
    leftovers = [ns for ns in network.list_netns() if netns_pattern(name).match(ns)]
    inventory = directory / "inventory.yaml"
    return SandboxStatus(
        name=name,
        directory=str(directory),
        subnet=record.subnet,
        bridge=bridge_name(name) if bridge_name(name) in links else None,
        inventory=str(inventory) if inventory.exists() else None,
        nodes=nodes,
        leftovers=[ns for ns in leftovers if ns not in known],
        slurm=slurm_status(record) if record.slurm else None,
    )
