"""Prove the cluster runs work: one Ray task pinned to every inventory node."""

from __future__ import annotations

from toolkit.cluster.plan import ClusterPlan
from toolkit.errors import ClusterError
from toolkit.nodeinfo import call_agent
from toolkit.transport.base import Transport

SMOKE_TIMEOUT_S = 180.0


def run_smoke(plan: ClusterPlan, transport: Transport) -> dict[str, dict[str, str]]:
    """Run one task per node through a driver on the head; map node name to where it ran.

    Raises:
        ClusterError: The driver failed, or a task did not run on its node.
    """
    answer = call_agent(transport, plan.head.node, plan.smoke_command(), SMOKE_TIMEOUT_S)
    ran: dict[str, dict[str, str]] = answer.get("ran", {})
    wrong = [name for name in (n.name for n in plan.nodes) if ran.get(name, {}).get("node") != name]
    if wrong:
        raise ClusterError(f"Ray tasks did not run on their nodes: {', '.join(wrong)} ({ran})")
    return ran
