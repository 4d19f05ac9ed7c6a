"""Probe every node of a cluster for its network and choose its NCCL / Gloo variables.

What ``rtk env`` runs: the same read-only probe as ``rtk up`` (the plan's probe command
with the node agent on stdin), on every node at once, then ``choose_env`` per node.
One node that cannot be reached or does not fit the profile never hides the others.

The plan comes from the cluster layer above; this module only needs its shape
(``ProbePlan``: the inventory and, per node, its role and probe command).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from toolkit.errors import NetEnvError
from toolkit.inventory import Inventory, Node
from toolkit.json_types import JsonObject
from toolkit.netenv.profiles import NetEnv, env_for_node
from toolkit.nodeinfo import call_agent
from toolkit.nodeinfo.network_facts import NetworkFacts
from toolkit.nodeinfo.probe import ProbeFacts, RouteFacts
from toolkit.transport.base import Transport
from toolkit.transport.group import run_each

PROBE_TIMEOUT_S = 60.0


class ProbeTarget(Protocol):
    """One node to probe: a ``toolkit.cluster.plan.NodePlan`` fits."""

    @property
    def name(self) -> str:
        """The node's inventory name."""
        ...

    @property
    def node(self) -> Node:
        """The node."""
        ...

    @property
    def role(self) -> str:
        """``head`` or ``worker``."""
        ...

    @property
    def probe_command(self) -> str:
        """The agent's probe command line for this node."""
        ...


class ProbePlan(Protocol):
    """Every node to probe: a ``toolkit.cluster.plan.ClusterPlan`` fits."""

    @property
    def inventory(self) -> Inventory:
        """The cluster's inventory."""
        ...

    @property
    def nodes(self) -> Sequence[ProbeTarget]:
        """Head first, then workers."""
        ...


@dataclass(frozen=True)
class NodeNetwork:
    """One node's network as probed, and the environment chosen for it.

    Attributes:
        name: The node's inventory name.
        role: ``head`` or ``worker``.
        address: The address rtk reaches it at.
        route: The probe's route to the head; None when the probe failed.
        detected: The probe's raw ``network`` answer (what ``--json`` prints).
        facts: The same, parsed; None when the probe failed.
        env: The chosen variables; None when the probe failed or the profile does not fit.
        error: Why there is no ``env``, if there is none.
    """

    name: str
    role: str
    address: str
    route: RouteFacts | None
    detected: JsonObject
    facts: NetworkFacts | None
    env: NetEnv | None
    error: str | None = None

    def to_json(self) -> JsonObject:
        """A JSON-ready dict."""
        return {
            "name": self.name,
            "role": self.role,
            "address": self.address,
            "route": self.route.to_json() if self.route else {},
            "detected": self.detected,
            "env": self.env.to_json() if self.env else None,
            "error": self.error,
        }


@dataclass(frozen=True)
class NetworkReport:
    """Every node's network and environment (``rtk env``)."""

    cluster: str
    profile: str
    nodes: tuple[NodeNetwork, ...]
    duration_s: float

    @property
    def failed(self) -> dict[str, str]:
        """Nodes without a chosen environment, with the reason."""
        return {n.name: n.error or "no environment" for n in self.nodes if n.env is None}

    def to_json(self) -> JsonObject:
        """A JSON-ready dict (``rtk env --json``)."""
        return {
            "cluster": self.cluster,
            "profile": self.profile,
            "duration_s": round(self.duration_s, 3),
            "nodes": [n.to_json() for n in self.nodes],
            "failed": {name: why for name, why in self.failed.items()},
        }


def detect_network(
    plan: ProbePlan, transport: Transport, timeout_s: float = PROBE_TIMEOUT_S
) -> NetworkReport:
    """Probe every node in parallel and choose each one's network environment.

    Never raises for one node's failure: it is recorded on that node (``error``).
    """
    began = time.monotonic()

    def probe(node_plan: ProbeTarget) -> ProbeFacts:
        answer = call_agent(transport, node_plan.node, node_plan.probe_command, timeout_s)
        return ProbeFacts.from_json(node_plan.name, answer)

    answers = run_each(plan.nodes, probe)
    nodes = []
    for node_plan in plan.nodes:
        error = answers.failed.get(node_plan.name)
        found = answers.succeeded.get(node_plan.name)
        nodes.append(_node_network(plan, node_plan, found, str(error) if error else None))
    return NetworkReport(
        cluster=plan.inventory.name,
        profile=plan.inventory.network.profile,
        nodes=tuple(nodes),
        duration_s=time.monotonic() - began,
    )


def _node_network(
    plan: ProbePlan, node_plan: ProbeTarget, probe: ProbeFacts | None, error: str | None
) -> NodeNetwork:
    node = node_plan.node
    facts = probe.network if probe is not None and error is None else None
    env = None
    if error is None and probe is not None and probe.route.error:
        error = f"{node.name}: {probe.route.error}"
    if error is None and facts is not None:
        try:
            env = env_for_node(plan.inventory, node, facts)
        except NetEnvError as e:
            error = str(e)
    return NodeNetwork(
        name=node.name,
        role=node_plan.role,
        address=node.address,
        route=probe.route if probe is not None else None,
        detected=dict(probe.network_json) if probe is not None else {},
        facts=facts,
        env=env,
        error=error,
    )
