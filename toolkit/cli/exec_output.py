"""``rtk exec``'s output at any N: per node on a few nodes, one block per distinct output on many.

On a small cluster (or with ``--verbose``) every line is prefixed by its node, then one
status line per node, as ``rtk exec`` always printed. Past ``SMALL_CLUSTER`` nodes the
nodes whose output is the same share one block headed by their hostlist range, and the
status lines are grouped by exit status, so ``nvidia-smi -L`` on 1,024 identical nodes
prints its few lines once. Output that differs (``hostname``) still shows per node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from toolkit.cluster.command import NodeRun
from toolkit.cluster.node_groups import NodeGroup, group_nodes

SMALL_CLUSTER = 8

Echo = Callable[[str, bool], None]  # (line, to stderr)


def group_outputs(runs: Sequence[NodeRun], stream: str) -> list[NodeGroup]:
    """Nodes grouped by their ``stdout`` or ``stderr`` text, exactly; empty output left out.

    Blocks come in the order of their first node (inventory order), not by size: output
    reads as the nodes run, and the largest block is seldom the interesting one.
    """
    if stream not in ("stdout", "stderr"):
        raise ValueError(f"stream must be stdout or stderr, not {stream!r}")
    members: dict[str, list[str]] = {}
    for run in runs:
        text = run.stdout if stream == "stdout" else run.stderr
        if text.strip():
            members.setdefault(text, []).append(run.node)
    return [NodeGroup(text, tuple(nodes)) for text, nodes in members.items()]


def run_state(run: NodeRun) -> str:
    """``exit 0`` or ``failed: why`` for one node."""
    return f"exit {run.exit_code}" if run.error is None else f"failed: {run.error}"


def render_per_node(runs: Sequence[NodeRun], echo: Echo) -> None:
    """Every line prefixed by its node, then a status line per node (stderr)."""
    width = max(len(r.node) for r in runs)
    for r in runs:
        for line in r.stdout.splitlines():
            echo(f"[{r.node:<{width}}] {line}", False)
        for line in r.stderr.splitlines():
            echo(f"[{r.node:<{width}}] {line}", True)
    for r in runs:
        echo(f"{r.node:<{width}}  {run_state(r)}  ({r.duration_s:.1f} s)", True)


def render_grouped(runs: Sequence[NodeRun], echo: Echo) -> None:
    """One block per distinct output, then the failures by cause and a line per exit status."""
    for stream, to_err in (("stdout", False), ("stderr", True)):
        for block in group_outputs(runs, stream):
            if len(block.nodes) == 1:
                for line in block.text.splitlines():
                    echo(f"[{block.nodes[0]}] {line}", to_err)
                continue
            echo(f"--- {block.hostlist()} ({block.count} nodes) ---", to_err)
            for line in block.text.splitlines():
                echo(line, to_err)
    by_name = {r.node: r for r in runs}
    for group in group_nodes((r.node, r.error or "") for r in runs if r.error is not None):
        echo(f"failed on {_nodes(group, by_name)}: {group.text}", True)
    exits = ((r.node, f"exit {r.exit_code}") for r in runs if r.error is None)
    for group in group_nodes(exits, key=lambda node, text: text):
        echo(f"{group.text} on {_nodes(group, by_name)}", True)


def _nodes(group: NodeGroup, by_name: dict[str, NodeRun]) -> str:
    """``12 node(s) n[0001-0012] (0.1-0.4 s)``: the nodes and how long they took."""
    took = [by_name[n].duration_s for n in group.nodes]
    low, high = f"{min(took):.1f}", f"{max(took):.1f}"
    span = f"{low} s" if low == high else f"{low}-{high} s"
    return f"{group.count} node(s) {group.hostlist()} ({span})"


def render_runs_text(runs: Sequence[NodeRun], echo: Echo, verbose: bool = False) -> None:
    """``rtk exec``'s text output: per node when few or ``verbose``, grouped otherwise."""
    if not runs:
        return
    if verbose or len(runs) <= SMALL_CLUSTER:
        render_per_node(runs, echo)
    else:
        render_grouped(runs, echo)
