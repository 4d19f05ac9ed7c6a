"""``sandbox.json``: what a sandbox created, written as it goes, read back by destroy."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from toolkit.errors import SandboxError
from toolkit.json_types import JsonObject


@dataclass
class NodeRecord:
    """One node as created: names, address and the host PIDs of its processes.

    Attributes:
        name: Host name inside the node (``node1``).
        address: Its IPv4 address.
        netns: Its network namespace; None until created.
        veth: Host-side veth; None until created.
        init_pid: Host PID of the node's PID-namespace init (tini); None until started.
        starter_pid: Host PID of the ``unshare`` process that waits for that init.
    """

    name: str
    address: str
    netns: str | None = None
    veth: str | None = None
    init_pid: int | None = None
    starter_pid: int | None = None


@dataclass
class SandboxRecord:
    """Everything a sandbox created on this machine.

    Attributes:
        name: The sandbox name.
        subnet: Its /24 as three octets.
        directory: Its directory.
        sshd: The sshd binary its nodes run.
        python: The Python its inventory names.
        created_at: Unix time of creation.
        bridge: The host bridge; None until created.
        nodes: Its nodes, in order.
        sysctl: Host sysctl files changed, with the values to restore.
        slurm: The sandbox runs SLURM (munged and slurmctld here, slurmd in each node).
        munged_pid: Host PID of its munged; None until started (or without SLURM).
        slurmctld_pid: Host PID of its slurmctld; None until started (or without SLURM).
    """

    name: str
    subnet: str
    directory: str
    sshd: str
    python: str
    created_at: float
    bridge: str | None = None
    nodes: list[NodeRecord] = field(default_factory=list)
    sysctl: dict[str, str] = field(default_factory=dict)
    slurm: bool = False
    munged_pid: int | None = None
    slurmctld_pid: int | None = None

    def to_json(self) -> JsonObject:
        """The record as plain data."""
        return asdict(self)

    def save(self, path: Path) -> None:
        """Write the record atomically (temporary file, then rename).

        Raises:
            SandboxError: The file cannot be written.
        """
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError as e:
            raise SandboxError(f"cannot write the sandbox record {path}: {e}") from e

    @classmethod
    def load(cls, path: Path) -> SandboxRecord:
        """Read a record written by ``save``.

        Raises:
            SandboxError: The file is missing, unreadable or not a record.
        """
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            nodes = [NodeRecord(**n) for n in data.pop("nodes")]
            return cls(nodes=nodes, **data)
        except FileNotFoundError as e:
            raise SandboxError(f"no sandbox record at {path}") from e
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            raise SandboxError(f"cannot read the sandbox record {path}: {e}") from e
