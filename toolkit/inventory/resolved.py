"""The resolved inventory: every node expanded, every inherited setting filled in.

This is what the plan, the transports and every later command read; nothing here
is optional any more, so callers never repeat the inheritance rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from toolkit.inventory.models import (
    FanoutSettings,
    NetworkSettings,
    PortSettings,
    RaySettings,
    SlurmSettings,
)

DEFAULT_SSH_PORT = 22
DEFAULT_CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SshTarget:
    """Everything needed to open an SSH connection to one node."""

    user: str | None
    port: int
    key_file: str | None
    jump_host: str | None
    known_hosts: str
    connect_timeout_s: float

    accept_new_host_keys: bool


@dataclass(frozen=True)
class Container:
    """The container a node's Ray runs in (``container:``, defaults applied).

    Attributes:
        runtime: docker, podman, apptainer or pyxis.
        image: The image, present on the node.
        mounts: Extra bind mounts, ``SRC:DST`` or ``SRC:DST:OPTIONS`` (``ro``).
        options: Extra words for the runtime's ``run``.
        gpus: auto, all or none.
        shm_size_bytes: The container's own /dev/shm size; None: the host's (host IPC).
    """

    runtime: str
    image: str
    mounts: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    gpus: str = "auto"
    shm_size_bytes: int | None = None

    def wants_gpus(self, node_gpus: int) -> bool:
        """True when the container gets the node's GPUs (``auto``: when it has any)."""
        return self.gpus == "all" or (self.gpus == "auto" and node_gpus > 0)


@dataclass(frozen=True)
class Node:
    """One node of the cluster, with its inherited settings applied.

    ``container`` None: Ray runs on the host's Python. Otherwise ``python`` is still
    the host's (rtk's stdlib node scripts run there) and ``ray`` is Ray's command
    inside the image.
    """

    name: str
    address: str
    gpus: int
    cpus: int | None
    resources: Mapping[str, float]
    ssh: SshTarget
    python: str
    ray: tuple[str, ...]
    env: Mapping[str, str]
    container: Container | None = None


@dataclass(frozen=True)
class Inventory:
    """A validated cluster description."""

    name: str
    transport: str
    nodes: tuple[Node, ...]
    head_name: str
    min_nodes: int
    network: NetworkSettings
    ports: PortSettings
    ray: RaySettings
    slurm: SlurmSettings
    source: str = "<embedded default>"
    fanout: FanoutSettings = field(default_factory=FanoutSettings)

    @property
    def head(self) -> Node:
        """The head node."""
        return self.node(self.head_name)

    @property
    def workers(self) -> tuple[Node, ...]:
        """Every node but the head, in inventory order."""
        return tuple(n for n in self.nodes if n.name != self.head_name)

    @property
    def temp_dir(self) -> str:
        """Ray's temp dir on every node; rtk's own files live under it too."""
        return self.ray.temp_dir or f"/tmp/rtk-{self.name}"

    @property
    def dashboard_host(self) -> str:
        """Address the dashboard binds on the head."""
        return self.ray.dashboard_host or self.head.address

    def node(self, name: str) -> Node:
        """The node called ``name``.

        Raises:
            KeyError: No such node.
        """
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)
