"""A running sandbox: its nodes, files, and ways in (nsenter, SSH)."""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import SandboxError
from toolkit.sandbox import config_files, procs
from toolkit.sandbox.names import Layout, NodeLayout, sandbox_dir, validate_name
from toolkit.sandbox.sandbox_json import SandboxRecord
from toolkit.sandbox.slurm.conf import SlurmLayout
from toolkit.sandbox.ssh_login import port_open, ssh_argv, wait_for_login
from toolkit.sandbox.teardown import destroy

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SandboxNode:
    """One node of a running sandbox.

    Attributes:
        name: Its host name (``node1``), also its name in the inventory.
        address: Its IPv4 address on the sandbox bridge.
        init_pid: Host PID of its PID-namespace init (``nsenter -t PID`` enters the node).
        netns: Its network namespace (``ip netns exec NETNS ...``).
        veth: The host-side end of its veth pair.
    """

    name: str
    address: str
    init_pid: int
    netns: str
    veth: str


class Sandbox:
    """A sandbox whose nodes are running; ``create`` or ``Sandbox.load`` gives one."""

    def __init__(self, layout: Layout, record: SandboxRecord) -> None:
        self.layout = layout
        self.record = record
        self.nodes = [
            SandboxNode(n.name, n.address, n.init_pid, n.netns, n.veth)
            for n in record.nodes
            if n.init_pid is not None and n.netns is not None and n.veth is not None
        ]
        if len(self.nodes) != len(layout.nodes):
            raise SandboxError(f"sandbox {layout.name}: its record lists nodes never started")

    def __repr__(self) -> str:
        return f"Sandbox({self.name!r}, {len(self.nodes)} nodes on {self.layout.subnet}.0/24)"

    @classmethod
    def load(cls, name: str) -> Sandbox:
        """Reattach to the running sandbox ``name`` from its record.

        Raises:
            SandboxError: There is no such sandbox, or a node of it is not running.
        """
        path = sandbox_dir(validate_name(name)) / "sandbox.json"
        if not path.exists():
            raise SandboxError(
                f"no sandbox named {name} on this machine (no {path}); "
                f"create one with `rtk sandbox up --nodes 3 --name {name}`"
            )
        record = SandboxRecord.load(path)
        sandbox = cls(Layout.build(record.name, record.subnet, len(record.nodes)), record)
        for node in sandbox.nodes:
            if not procs.is_node_init(node.init_pid, node.netns):
                raise SandboxError(
                    f"sandbox {name}: {node.name} is not running (its init, PID "
                    f"{node.init_pid}, is gone); remove it with `rtk sandbox down --name {name}`"
                )
        return sandbox

    @property
    def name(self) -> str:
        """The sandbox name, also the inventory's cluster name."""
        return self.layout.name

    @property
    def directory(self) -> Path:
        """The sandbox directory on the host."""
        return self.layout.directory

    @property
    def inventory_path(self) -> Path:
        """The rtk inventory describing the sandbox."""
        return self.layout.inventory_path

    @property
    def key_path(self) -> Path:
        """The client private key every node accepts for root."""
        return self.layout.key_path

    @property
    def known_hosts_path(self) -> Path:
        """known_hosts with every node's address and host key."""
        return self.layout.known_hosts

    @property
    def slurm(self) -> bool:
        """Whether the sandbox runs SLURM (``create(..., slurm=True)``)."""
        return self.record.slurm

    def slurm_env(self) -> dict[str, str]:
        """Environment that points SLURM's commands (sbatch, srun, sinfo...) at the sandbox.

        Jobs inherit it from the submitter, as SLURM exports the whole environment by
        default; inside a node, /etc/slurm is the sandbox's config anyway.

        Raises:
            SandboxError: The sandbox runs no SLURM.
        """
        if not self.record.slurm:
            raise SandboxError(
                f"sandbox {self.name} runs no SLURM: create it with slurm=True "
                "(rtk sandbox up --slurm)"
            )
        return {"SLURM_CONF": str(SlurmLayout.of(self.layout).conf)}

    def node(self, node_name: str) -> SandboxNode:
        """The node called ``node_name``.

        Raises:
            SandboxError: No node has that name.
        """
        for node in self.nodes:
            if node.name == node_name:
                return node
        names = ", ".join(n.name for n in self.nodes)
        raise SandboxError(f"sandbox {self.name} has no node {node_name!r} (it has {names})")

    def hosts_file(self, node_name: str) -> Path:
        """The host-side file a node sees, read-only, as its /etc/hosts."""
        return Path(self._layout_of(node_name).hosts_file)

    def _layout_of(self, node_name: str) -> NodeLayout:

        return next(n for n in self.layout.nodes if n.name == node_name)

    def run_in(
        self, node_name: str, argv: Sequence[str], timeout_s: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside a node's namespaces (nsenter) and capture its output.

        Raises:
            SandboxError: No such node, or the command could not start or ran too long.
        """
        return procs.run_in(self.node(node_name).init_pid, argv, timeout_s)

    def ssh_argv(self, node_name: str, *remote: str) -> list[str]:
        """The ssh command line that runs ``remote`` on a node as root."""
        node = self.node(node_name)
        return ssh_argv(node.address, self.key_path, self.known_hosts_path, *remote)

    def stop_sshd(self, node_name: str, timeout_s: float = 10.0) -> None:
        """Stop a node's sshd (sessions already open stay) and wait until its port closes.

        Raises:
            SandboxError: The port still accepts connections after ``timeout_s``.
        """
        node = self.node(node_name)
        pid_file = config_files.SSHD_PID_FILE
        script = f"if [ -f {pid_file} ]; then kill $(cat {pid_file}) || true; rm -f {pid_file}; fi"
        self.run_in(node_name, ["sh", "-c", script], timeout_s)
        deadline = time.monotonic() + timeout_s
        while port_open(node.address, 22, timeout_s=0.5):
            if time.monotonic() > deadline:
                raise SandboxError(f"{node_name}: sshd still listens {timeout_s:g} s after kill")
            time.sleep(0.02)
        logger.info("stopped sshd of %s in sandbox %s", node_name, self.name)

    def start_sshd(self, node_name: str, timeout_s: float = 10.0) -> None:
        """Start a node's sshd again and wait until a real SSH login works.

        Raises:
            SandboxError: sshd failed to start, or no login succeeded in ``timeout_s``.
        """
        node = self.node(node_name)
        if not port_open(node.address, 22, timeout_s=0.5):
            command = config_files.start_sshd_command(self._layout_of(node_name), self.record.sshd)
            done = self.run_in(node_name, ["sh", "-c", command], timeout_s)
            if done.returncode != 0:
                raise SandboxError(f"{node_name}: sshd did not start: {done.stderr.strip()}")
        wait_for_login(node.name, node.address, self.key_path, self.known_hosts_path, timeout_s)
        logger.info("started sshd of %s in sandbox %s", node_name, self.name)

    def destroy(self) -> list[str]:
        """Remove the whole sandbox; return what was removed (see ``destroy``)."""
        return destroy(self.name)
