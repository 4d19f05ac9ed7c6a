"""Tear a cluster down: stop only this cluster's Ray on every node, remove its files.

Processes are found by the ``RTK_CLUSTER_DIR`` marker that every process started
from rtk's env file inherits, never by name, so another Ray on the same machine
(``ray stop`` would kill it, ray#43449) keeps running. Works when the head is gone.
A node whose Ray runs in a container has that container stopped and removed first:
the one with this cluster's and node's labels and rtk's name for it, no other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from toolkit.cluster.plan import STOP_GRACE_S, ClusterPlan, NodePlan
from toolkit.cluster.progress_reporter import Reporter
from toolkit.errors import ClusterError
from toolkit.nodeinfo import call_agent
from toolkit.state.store import StateStore
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


def stop_node(node_plan: NodePlan, transport: Transport) -> dict[str, Any]:
    """Remove the node's container (if it has one), then stop rtk's processes there.

    Returns:
        The node agent's ``stop`` answer; with a container, ``containers_removed``
        holds the ids the runtime removed (none when it was not there).

    Raises:
        ClusterError: The runtime did not answer, or the agent failed.
        toolkit.errors.TransportError: The node could not be reached.
    """
    container = node_plan.container
    removed: list[str] = []
    if container is not None:
        command = container.remove_command(STOP_GRACE_S)
        result = transport.run(node_plan.node, command, timeout_s=STOP_TIMEOUT_S)
        if not result.ok:
            why = result.tail() or f"exit status {result.exit_code}"
            raise ClusterError(
                f"{node_plan.name}: cannot remove container {container.name} "
                f"({container.runtime}): {why}"
            )
        removed = result.stdout.split()
    answer = call_agent(transport, node_plan.node, node_plan.stop_command, STOP_TIMEOUT_S)
    if container is not None:
        answer["containers_removed"] = removed
    return answer


def stop_nodes(
    nodes: Sequence[NodePlan],
    transport: Transport,
    reporter: Reporter,
    parallel: int = DEFAULT_PARALLEL,
) -> GroupResult[dict[str, Any]]:
    """Run each node's stop command, ``parallel`` (the inventory's ``fanout``) at a time."""

    def stop(node_plan: NodePlan) -> dict[str, Any]:
        answer = stop_node(node_plan, transport)
        left = answer.get("left") or []
        note = f", {len(left)} still running: {left}" if left else ""
        if node_plan.container is not None:
            gone = len(answer["containers_removed"])
            note += f", container {node_plan.container.name} " + (
                "removed" if gone else "was not there"
            )
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
