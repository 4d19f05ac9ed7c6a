"""Run one command on every node (``rtk exec``), in the cluster's environment when it is up."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from toolkit.cluster.containers.docker import name_tokens
from toolkit.cluster.plan import ClusterPlan, NodePlan
from toolkit.cluster.plan_summary import RenderedNode, group_nodes
from toolkit.json_types import JsonObject
from toolkit.shell import join, quote
from toolkit.transport.base import CommandResult, Transport
from toolkit.transport.group import run_each


@dataclass
class NodeRun:
    """One node's run of the command, or why it did not run."""

    node: str
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the command ran and exited 0."""
        return self.exit_code == 0

    def to_json(self) -> JsonObject:
        """The run as ``rtk exec --json`` prints it."""
        return {
            "node": self.node,
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "duration_s": self.duration_s,
            "error": self.error,
        }


def command_line(plan: ClusterPlan, argv: Sequence[str], with_env: bool) -> str:
    """The shell text run on each node: argv quoted, after the env file when present.

    On a node with a container it runs inside that container (``node_command``).
    """
    command = join(argv)
    if not with_env:
        return command
    env_file = quote(plan.paths.env_file)
    return f"if [ -f {env_file} ]; then set -a && . {env_file} && set +a; fi; {command}"


def node_command(node_plan: NodePlan, command: str) -> str:
    """Shell text ``command`` as run on the node: in its container when it has one."""
    container = node_plan.container
    return command if container is None else container.exec_command(command)


def container_lines(plan: ClusterPlan, command: str) -> tuple[str, ...]:
    """How ``command`` runs on the nodes with a container: a line per shape, host lists first."""
    rendered = [
        RenderedNode(n.name, "node", (node_command(n, command),), name_tokens(n.container))
        for n in plan.nodes
        if n.container is not None
    ]
    return tuple(f"[{b.hostlist()}] {b.lines[0]}" for b in group_nodes(rendered))


def run_everywhere(
    plan: ClusterPlan,
    transport: Transport,
    argv: Sequence[str],
    *,
    with_env: bool = True,
    timeout_s: float = 600.0,
) -> list[NodeRun]:
    """Run ``argv`` on every node, ``fanout.parallel`` at a time; a result per node, in order."""
    command = command_line(plan, argv, with_env)

    def run(node_plan: NodePlan) -> CommandResult:
        return transport.run(node_plan.node, node_command(node_plan, command), timeout_s=timeout_s)

    group = run_each(plan.nodes, run, parallel=plan.inventory.fanout.parallel)
    runs = []
    for node_plan in plan.nodes:
        name = node_plan.name
        if name in group.results:
            r = group.results[name]
            runs.append(NodeRun(name, r.exit_code, r.stdout, r.stderr, r.duration_s))
        else:
            runs.append(NodeRun(name, None, error=str(group.errors[name])))
    return runs


def runs_to_json(runs: Sequence[NodeRun]) -> JsonObject:
    """``rtk exec --json`` output."""
    return {"nodes": [r.to_json() for r in runs], "failed": [r.node for r in runs if not r.ok]}
