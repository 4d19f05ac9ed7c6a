"""What the node agent's ``probe`` reports, as typed records (read on the host).

``agent.py probe`` prints JSON (see ``agent.probe``); ``ProbeFacts.from_json`` reads
it once, right after the agent answers, and rejects a malformed answer with an error
that names the node and the field. Bring-up and ``rtk env`` use the record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit.fields import Fields
from toolkit.json_types import JsonObject
from toolkit.nodeinfo.answer_errors import answer_fields
from toolkit.nodeinfo.network_facts import NetworkFacts
from toolkit.nodeinfo.start_facts import RayFacts, TempDirFacts

WHAT = "probe answer"


@dataclass(frozen=True)
class RouteFacts:
    """How the node reaches the head.

    Attributes:
        head_ip: The head's address, resolved on the node.
        source_ip: This node's address on the route to the head (``RTK_NODE_IP``).
        interface: The route's interface, or the inventory's ``network.interface``.
        error: Why the route could not be found (the head's name did not resolve).
    """

    head_ip: str | None = None
    source_ip: str | None = None
    interface: str | None = None
    error: str | None = None

    @classmethod
    def read(cls, fields: Fields) -> RouteFacts:
        """Read the ``route`` object of a probe answer."""
        return cls(
            head_ip=fields.text_or_none("head_ip"),
            source_ip=fields.text_or_none("source_ip"),
            interface=fields.text_or_none("interface"),
            error=fields.text_or_none("error"),
        )

    def to_json(self) -> JsonObject:
        """The ``route`` object as the agent sends it (``error`` alone on failure)."""
        if self.error is not None:
            return {"error": self.error}
        return {"head_ip": self.head_ip, "source_ip": self.source_ip, "interface": self.interface}


@dataclass(frozen=True)
class ContainerFacts:
    """The node's container runtime, as the probe found it (``agent.container_facts``).

    Attributes:
        runtime: docker or podman.
        path: Where the runtime's command is; None: not on PATH.
        version: Its version, when it answered.
        error: Why it did not answer (not found, daemon down, permission denied).
        image_present: The image is on the node (None: not asked, it did not answer).
        gpu_hook: The runtime can hand GPUs to a container (None: not asked).
        gpu_hook_via: What provides it (docker's nvidia runtime, the hook, a CDI spec).
        state: rtk's container of this node: running, exited, created...; None: none.
    """

    runtime: str
    path: str | None = None
    version: str | None = None
    error: str | None = None
    image_present: bool | None = None
    gpu_hook: bool | None = None
    gpu_hook_via: str | None = None
    state: str | None = None

    @property
    def running(self) -> bool:
        """True when rtk's container of this node runs (and so Ray, its main process)."""
        return self.state == "running" or (self.state or "").startswith("up")

    @classmethod
    def read(cls, fields: Fields) -> ContainerFacts:
        """Read the ``container`` object of a probe answer."""
        hook = fields.nested_or_none("gpu_hook")
        return cls(
            runtime=fields.text("runtime"),
            path=fields.text_or_none("path"),
            version=fields.text_or_none("version"),
            error=fields.text_or_none("error"),
            image_present=fields.flag_or_none("image_present"),
            gpu_hook=None if hook is None else hook.flag("found"),
            gpu_hook_via=None if hook is None else hook.text_or_none("via"),
            state=fields.text_or_none("state"),
        )

    def to_json(self) -> JsonObject:
        """The ``container`` object as the agent sends it."""
        hook: JsonObject | None = (
            None if self.gpu_hook is None else {"found": self.gpu_hook, "via": self.gpu_hook_via}
        )
        return {
            "runtime": self.runtime,
            "path": self.path,
            "version": self.version,
            "error": self.error,
            "image_present": self.image_present,
            "gpu_hook": hook,
            "state": self.state,
        }


@dataclass(frozen=True)
class ProbeFacts:
    """One node's answer to ``agent.py probe``: what bring-up decides on.

    Attributes:
        node: The node's name in the inventory.
        route: The route to the head.
        network: The node's network facts, for the NCCL/Gloo profile (``toolkit.netenv``).
        network_json: The agent's ``network`` object as sent (``rtk env --json`` shows it).
        rtk_pids: This cluster's processes already on the node.
        raylet_running: This cluster's raylet runs there (``rtk up`` leaves it).
        busy_ports: Ports of the plan that another program listens on.
        busy_port_holders: Of those, port -> the program and its pid, where known.
        hostname: The node's host name, when reported.
        python_version: The node's Python version, when reported.
        rtk_digest: The digest of the rtk source the node's Python imports
            (``toolkit.node.common.source_digest``; None: none installed, or not reported).
        rtk_path: Where that source is.
        container: The container runtime's facts, when the node has a container.
        temp_dir: Ray's temp dir there (None: not reported).
        ray: The node's Python's Ray (None: not reported).
        gpu_restore_file: The GPU settings an earlier run left there to put back
            (``gpu_control.py``'s restore file; None: none).
    """

    node: str
    route: RouteFacts
    network: NetworkFacts
    network_json: Mapping[str, Any] = field(default_factory=dict)
    rtk_pids: tuple[int, ...] = ()
    raylet_running: bool = False
    busy_ports: tuple[int, ...] = ()
    busy_port_holders: Mapping[int, str] = field(default_factory=dict)
    hostname: str | None = None
    python_version: str | None = None
    rtk_digest: str | None = None
    rtk_path: str | None = None
    container: ContainerFacts | None = None
    temp_dir: TempDirFacts | None = None
    ray: RayFacts | None = None
    gpu_restore_file: str | None = None

    def detected(self) -> dict[str, str | None]:
        """The facts the plan's ``Detect`` placeholders name (``node_ip``, ``interface``)."""
        return {"node_ip": self.route.source_ip, "interface": self.route.interface}

    @classmethod
    def from_json(cls, node: str, data: Any) -> ProbeFacts:
        """Read the agent's probe answer for ``node``.

        Raises:
            ClusterError: A field is missing or of the wrong type (named with the node).
        """
        fields = answer_fields(node, WHAT, data)
        network = dict(fields.nested("network").data)
        rtk = fields.nested_or_none("rtk_source")
        container = fields.nested_or_none("container")
        temp_dir = fields.nested_or_none("temp_dir")
        ray = fields.nested_or_none("ray")
        return cls(
            node=node,
            route=RouteFacts.read(fields.nested("route")),
            network=NetworkFacts.from_json(network),
            network_json=network,
            rtk_pids=fields.integers("rtk_pids", required=True),
            raylet_running=fields.flag("raylet_running"),
            busy_ports=fields.integers("busy_ports", required=True),
            busy_port_holders={
                int(port): who for port, who in fields.text_map("busy_port_holders").items()
            },
            hostname=fields.text_or_none("hostname"),
            python_version=fields.text_or_none("python"),
            rtk_digest=None if rtk is None else rtk.text("digest"),
            rtk_path=None if rtk is None else rtk.text("path"),
            container=None if container is None else ContainerFacts.read(container),
            temp_dir=None if temp_dir is None else TempDirFacts.read(temp_dir),
            ray=None if ray is None else RayFacts.read(ray),
            gpu_restore_file=fields.text_or_none("gpu_restore_file"),
        )

    def to_json(self) -> JsonObject:
        """The answer as the agent sends it (``from_json`` reads it back)."""
        out: JsonObject = {
            "hostname": self.hostname,
            "python": self.python_version,
            "route": self.route.to_json(),
            "network": dict(self.network_json),
            "rtk_pids": list(self.rtk_pids),
            "raylet_running": self.raylet_running,
            "busy_ports": list(self.busy_ports),
        }
        if self.busy_port_holders:
            out["busy_port_holders"] = {str(p): w for p, w in self.busy_port_holders.items()}
        if self.rtk_digest is not None:
            out["rtk_source"] = {"path": self.rtk_path, "digest": self.rtk_digest}
        if self.container is not None:
            out["container"] = self.container.to_json()
        if self.temp_dir is not None:
            out["temp_dir"] = self.temp_dir.to_json()
        if self.ray is not None:
            out["ray"] = self.ray.to_json()
        if self.gpu_restore_file is not None:
            out["gpu_restore_file"] = self.gpu_restore_file
        return out
