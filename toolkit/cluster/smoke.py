"""Prove the cluster runs work: one Ray task pinned to every inventory node."""

from __future__ import annotations

from toolkit.cluster.plan import ClusterPlan
from toolkit.errors import ClusterError
from toolkit.nodeinfo import call_agent
from toolkit.nodeinfo.answer_errors import answer_fields
from toolkit.transport.base import Transport

SMOKE_TIMEOUT_S = 180.0


def run_smoke(plan: ClusterPlan, transport: Transport) -> dict[str, dict[str, str]]:
    """Run one task per node through a driver on the head; map node name to where it ran.

    Raises:
        ClusterError: The driver failed, or a task did not run on its node.
    """
    answer = call_agent(transport, plan.head.node, plan.smoke_command(), SMOKE_TIMEOUT_S)
    tasks = answer_fields(plan.head.node.name, "smoke answer", answer).nested_or_none("ran")
    ran = {} if tasks is None else {name: tasks.text_map(name) for name in tasks.data}
    wrong = [name for name in (n.name for n in plan.nodes) if ran.get(name, {}).get("node") != name]
    if wrong:
        raise ClusterError(f"Ray tasks did not run on their nodes: {', '.join(wrong)} ({ran})")
    return ran
