"""Tear a cluster down: stop only this cluster's Ray on every node, remove its files.

Processes are found by the ``RTK_CLUSTER_DIR`` marker that every process started
from rtk's env file inherits, never by name, so another Ray on the same machine
(``ray stop`` would kill it, ray#43449) keeps running. Works when the head is gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from toolkit.cluster.plan import STOP_GRACE_S, ClusterPlan, NodePlan
from toolkit.cluster.report import Reporter
from toolkit.cluster.state import StateStore
from toolkit.node import call_agent
from toolkit.transport.base import Transport
from toolkit.transport.group import DEFAULT_PARALLEL, GroupResult, run_each

STOP_TIMEOUT_S = STOP_GRACE_S + 30.0


@dataclass
class DownResult:
    """Per node: what was stopped, or why it could not be."""

    cluster: str
    stopped: dict[str, dict[str, Any]]
    failed: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``rtk down --json``)."""
        return {"cluster": self.cluster, "stopped": self.stopped, "failed": self.failed}


def stop_nodes(
    nodes: Sequence[NodePlan],
    transport: Transport,
    reporter: Reporter,
    parallel: int = DEFAULT_PARALLEL,
) -> GroupResult[dict[str, Any]]:
    """Run each node's stop command, ``parallel`` (the inventory's ``fanout``) at a time."""

    def stop(node_plan: NodePlan) -> dict[str, Any]:
        answer = call_agent(transport, node_plan.node, node_plan.stop_command, STOP_TIMEOUT_S)
        left = answer.get("left") or []
        note = f", {len(left)} still running: {left}" if left else ""
        reporter.node(
            node_plan.name,
            f"stopped {answer.get('stopped', 0)} process(es)"
            f" ({answer.get('killed', 0)} needed SIGKILL){note}",
        )
        reporter.phase(node_plan.name, "stopped" if not left else "failed", note)
        return answer

    return run_each(nodes, stop, parallel=parallel)


def down(
    plan: ClusterPlan, transport: Transport, store: StateStore, reporter: Reporter
) -> DownResult:
    """Stop the cluster everywhere; forget its local state when every node is clean."""
    group = stop_nodes(plan.nodes, transport, reporter, plan.inventory.fanout.parallel)
    failed = {name: str(error) for name, error in group.failed.items()}
    for name, answer in group.results.items():
        if answer.get("left"):
            failed[name] = f"processes {answer['left']} survived SIGKILL"
    for name, reason in failed.items():
        reporter.node(name, f"failed: {reason}")
    if not failed:
        store.remove()
    return DownResult(plan.inventory.name, dict(group.results), failed)
