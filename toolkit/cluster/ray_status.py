"""Which inventory nodes are alive in Ray, with what resources, seen from the head."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from toolkit.cluster.plan import ClusterPlan
from toolkit.errors import ClusterError, TransportError
from toolkit.inventory import Node
from toolkit.json_types import JsonObject
from toolkit.nodeinfo import call_agent
from toolkit.nodeinfo.answer_errors import answer_fields
from toolkit.ray_resources import host_resource
from toolkit.rundir.preflight import Exclusion
from toolkit.transport.base import Transport

STATUS_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RayNodeEntry:
    """One node of Ray's, as the agent's ``status`` answer lists it.

    Attributes:
        node_id: Ray's id of the node (None: not given).
        node_ip: The address its raylet registered (None: not given).
        alive: Whether Ray's ``state`` is ``ALIVE``.
        resources: Its total resources, by name (empty: not given).
    """

    node_id: str | None
    node_ip: str | None
    alive: bool
    resources: dict[str, float]

    @classmethod
    def from_answer(cls, node: str, data: object, index: int) -> RayNodeEntry:
        """Entry ``index`` of the ``status`` answer's ``nodes``, from ``node`` (the head).

        Raises:
            ClusterError: A field is not what the agent writes (naming it).
        """
        f = answer_fields(node, "status answer", data, ("nodes", index))
        resources = f.nested_or_none("resources")
        return cls(
            node_id=f.text_or_none("node_id"),
            node_ip=f.text_or_none("node_ip"),
            alive=f.text_or_none("state") == "ALIVE",
            resources={}
            if resources is None
            else {name: resources.number(name) for name in resources.data},
        )


def ray_nodes(node: str, answer: object) -> tuple[str | None, list[RayNodeEntry]]:
    """The Ray version and the nodes of the agent's ``status`` answer from ``node``.

    Raises:
        ClusterError: The answer is not what the agent writes (naming the field).
    """
    f = answer_fields(node, "status answer", answer)
    entries = f.data.get("nodes")
    if entries is not None and not isinstance(entries, list):
        raise f.fail("nodes", "a list of nodes")
    return f.text_or_none("ray_version"), [
        RayNodeEntry.from_answer(node, entry, i) for i, entry in enumerate(entries or [])
    ]


@dataclass
class NodeStatus:
    """One inventory node as Ray sees it."""

    name: str
    role: str
    address: str
    expected: dict[str, float] = field(default_factory=dict)
    alive: bool = False
    node_ip: str | None = None
    resources: dict[str, float] = field(default_factory=dict)
    problem: str | None = None
    # Every live Ray node entry that claims this host. More than one means a stale
    # entry: its raylet died and a new one took its pinned ports before the GCS's
    # health check noticed (about 15 s in Ray 2.60).
    ray_node_ids: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        """Alive with at least the GPUs, CPUs and resources the inventory expects."""
        return self.alive and self.problem is None


@dataclass
class ClusterStatus:
    """The whole cluster as Ray sees it."""

    cluster: str
    dashboard_url: str
    nodes: list[NodeStatus]
    ray_version: str | None = None
    error: str | None = None
    # The inventory's nodes left out by rtk up --exclude: not in ``nodes``, not missed.
    excluded: list[Exclusion] = field(default_factory=list)

    @property
    def ready(self) -> list[str]:
        """Names of the nodes that are alive with what they should have."""
        return [n.name for n in self.nodes if n.ready]

    def to_json(self) -> JsonObject:
        """A JSON-ready dict (``rtk status --json``)."""
        data = asdict(self)
        data["alive"] = [n.name for n in self.nodes if n.alive]
        data["expected"] = len(self.nodes)
        data["excluded"] = [e.to_json() for e in self.excluded]
        return data


def cluster_status(plan: ClusterPlan, transport: Transport) -> ClusterStatus:
    """Ask Ray on the head which nodes are alive; never raises for a down cluster."""
    status = ClusterStatus(
        cluster=plan.inventory.name,
        dashboard_url=plan.dashboard_url,
        nodes=[
            NodeStatus(n.node.name, n.role, n.node.address, expected_resources(n.node))
            for n in plan.nodes
        ],
        excluded=list(plan.excluded),
    )
    try:
        answer = call_agent(transport, plan.head.node, plan.status_command(), STATUS_TIMEOUT_S)
        status.ray_version, entries = ray_nodes(plan.head.node.name, answer)
    except (ClusterError, TransportError) as e:
        status.error = _explain(str(e), plan)
        return status
    _match(status, entries)
    return status


def _match(status: ClusterStatus, entries: list[RayNodeEntry]) -> None:
    alive = [n for n in entries if n.alive]
    for node in status.nodes:
        marker = host_resource(node.name)
        claims = [n for n in alive if marker in n.resources]
        if not claims:
            continue
        found = claims[-1]
        node.ray_node_ids = [str(n.node_id) for n in claims]
        node.alive = True
        node.node_ip = found.node_ip
        node.resources = dict(found.resources)
        short = [
            f"{node.resources.get(name, 0.0):g} {name}, expected {want:g}"
            for name, want in node.expected.items()
            if node.resources.get(name, 0.0) < want
        ]
        if short:
            node.problem = "joined with " + "; ".join(short)
        if len(claims) > 1:
            node.problem = (
                f"{len(claims)} live Ray nodes claim this host; the older ones are stale "
                "(their raylet died) and Ray drops them after its health check"
            )


def expected_resources(node: Node) -> dict[str, float]:
    """What a node must bring to Ray: its GPUs, its CPUs when pinned, its extra resources."""
    expected: dict[str, float] = {}
    if node.gpus:
        expected["GPU"] = float(node.gpus)
    if node.cpus is not None:
        expected["CPU"] = float(node.cpus)
    expected.update(node.resources)
    return expected


def _explain(error: str, plan: ClusterPlan) -> str:
    if "No such file" in error and plan.paths.env_file in error:
        return f"not running: no rtk environment on the head ({plan.head.node.name}); rtk up first"
    if "ConnectionError" in error or "Connection refused" in error or "Failed to connect" in error:
        return f"the head's dashboard at {plan.dashboard_url} does not answer: {error}"
    return error
