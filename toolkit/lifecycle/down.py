"""Tear a cluster down: stop only this cluster's Ray on every node, remove its files.

Processes are found by the ``RTK_CLUSTER_DIR`` marker that every process started
from rtk's env file inherits, never by name, so another Ray on the same machine
(``ray stop`` would kill it, ray#43449) keeps running. Works when the head is gone.
A node whose Ray runs in a container has that container stopped and removed first:
the one with this cluster's and node's labels and rtk's name for it, no other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from toolkit.cluster.plan import STOP_GRACE_S, ClusterPlan, NodePlan
from toolkit.cluster.progress_reporter import Reporter
from toolkit.errors import ClusterError
from toolkit.json_types import JsonObject
from toolkit.nodeinfo import call_agent
from toolkit.nodeinfo.answer_errors import answer_fields
from toolkit.state.store import StateStore
from toolkit.transport.base import Transport
from toolkit.transport.group import DEFAULT_PARALLEL, GroupResult, run_each

STOP_TIMEOUT_S = STOP_GRACE_S + 30.0


@dataclass(frozen=True)
class NodeStopped:
    """One node's stop: the agent's ``stop`` answer, and the container removed first.

    Attributes:
        stopped: This cluster's processes found on the node.
        killed: How many of them needed SIGKILL.
        left: The pids that survived SIGKILL.
        removed: Whether the cluster's directory on the node was removed (None: the
            agent did not say).
        containers_removed: The ids the container runtime removed (None: the node has
            no container; empty: it was not there).
    """

    stopped: int
    killed: int
    left: tuple[int, ...]
    removed: bool | None = None
    containers_removed: tuple[str, ...] | None = None

    def to_json(self) -> JsonObject:
        """As the agent answered, with ``containers_removed`` for a container node."""
        out: JsonObject = {
            "stopped": self.stopped,
            "killed": self.killed,
            "left": [name for name in self.left],
        }
        if self.removed is not None:
            out["removed"] = self.removed
        if self.containers_removed is not None:
            out["containers_removed"] = list(self.containers_removed)
        return out

    @classmethod
    def from_answer(cls, node: str, answer: object) -> NodeStopped:
        """The agent's ``stop`` answer from ``node``.

        Raises:
            ClusterError: A field is not what the agent writes (naming the field).
        """
        f = answer_fields(node, "stop answer", answer)
        return cls(
            stopped=f.integer_or_none("stopped") or 0,
            killed=f.integer_or_none("killed") or 0,
            left=f.integers("left"),
            removed=f.flag_or_none("removed"),
        )


@dataclass
class DownResult:
    """Per node: what was stopped, or why it could not be."""

    cluster: str
    stopped: dict[str, NodeStopped]
    failed: dict[str, str]

    def to_json(self) -> JsonObject:
        """A JSON-ready dict (``rtk down --json``)."""
        stopped: JsonObject = {name: answer.to_json() for name, answer in self.stopped.items()}
        failed: JsonObject = {name: why for name, why in self.failed.items()}
        return {"cluster": self.cluster, "stopped": stopped, "failed": failed}


def stop_node(node_plan: NodePlan, transport: Transport) -> NodeStopped:
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
    answer = NodeStopped.from_answer(
        node_plan.name,
        call_agent(transport, node_plan.node, node_plan.stop_command, STOP_TIMEOUT_S),
    )
    if container is not None:
        answer = replace(answer, containers_removed=tuple(removed))
    return answer


def stop_nodes(
    nodes: Sequence[NodePlan],
    transport: Transport,
    reporter: Reporter,
    parallel: int = DEFAULT_PARALLEL,
) -> GroupResult[NodeStopped]:
    """Run each node's stop command, ``parallel`` (the inventory's ``fanout``) at a time."""

    def stop(node_plan: NodePlan) -> NodeStopped:
        answer = stop_node(node_plan, transport)
        left = list(answer.left)
        note = f", {len(left)} still running: {left}" if left else ""
        if node_plan.container is not None:
            gone = len(answer.containers_removed or ())
            note += f", container {node_plan.container.name} " + (
                "removed" if gone else "was not there"
            )
        reporter.node(
            node_plan.name,
            f"stopped {answer.stopped} process(es) ({answer.killed} needed SIGKILL){note}",
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
        if answer.left:
            failed[name] = f"processes {list(answer.left)} survived SIGKILL"
    for name, reason in failed.items():
        reporter.node(name, f"failed: {reason}")
    if not failed:
        store.remove()
    return DownResult(plan.inventory.name, dict(group.results), failed)
