"""What a bring-up that fell short says: each missing node with its cause, at any N.

Nodes whose ``ray start`` failed have their cause already (``node_start``). Nodes
whose Ray started but never joined are asked why once the wait is over
(``explain_unjoined``: the node's Ray logs, whether it reaches the head's ports), in
parallel. ``missing_text`` is the error's text: a line per node for a few, one line
per cause for many (``node_groups``).
"""

from __future__ import annotations

from toolkit.cluster.node_groups import group_nodes, render_failure_groups
from toolkit.cluster.plan import ClusterPlan, NodePlan
from toolkit.cluster.progress_reporter import Reporter
from toolkit.cluster.ray_status import ClusterStatus
from toolkit.lifecycle.failures.causes import explain_start_failure, port_names
from toolkit.lifecycle.node_start import NodeOutcome, read_facts_after
from toolkit.transport.base import Transport
from toolkit.transport.group import run_each

# Up to this many missing nodes are named one per line in the error; more are grouped.
MISSING_ONE_BY_ONE = 8


def explain_unjoined(
    plan: ClusterPlan,
    transport: Transport,
    outcomes: dict[str, NodeOutcome],
    status: ClusterStatus,
    reporter: Reporter,
) -> None:
    """Ask each node that started but did not join why, and record it on its outcome.

    A node Ray lists with a problem of its own (joined without its GPUs...) keeps that
    problem as its cause; so does a node that cannot be asked.
    """
    seen = {n.name: n for n in status.nodes}
    head = plan.head.name
    head_version = outcomes[head].ray_version

    def unjoined(node_plan: NodePlan) -> bool:
        outcome, node = outcomes[node_plan.name], seen.get(node_plan.name)
        return outcome.error is None and (node is None or (not node.alive and not node.problem))

    def ask(node_plan: NodePlan) -> None:
        facts = read_facts_after(node_plan, plan, transport)
        if facts is None:
            return
        failure = explain_start_failure(
            "its Ray",
            None,
            "",
            facts,
            port_names(plan.inventory.ports),
            head,
            head_version,
            host_ray=node_plan.container is None,
        )
        outcome = outcomes[node_plan.name]
        outcome.error, outcome.detail = failure.cause, failure.detail
        reporter.node(node_plan.name, f"did not join: {failure.cause}")
        if failure.detail:
            reporter.detail(node_plan.name, failure.detail)

    missing = [n for n in plan.nodes if unjoined(n)]
    if missing:
        reporter.info(f"asking {len(missing)} node(s) that did not join why")
        run_each(missing, ask, parallel=plan.inventory.fanout.parallel)


def missing_text(
    plan: ClusterPlan, outcomes: dict[str, NodeOutcome], status: ClusterStatus | None, need: int
) -> str:
    """The error of a bring-up with fewer than ``need`` nodes: each missing one's cause."""
    lines = [f"cluster {plan.inventory.name}: fewer than min_nodes={need} node(s) came up"]
    by_name = {n.name: n for n in status.nodes} if status else {}
    missing: list[tuple[str, str]] = []
    for name, outcome in outcomes.items():
        seen = by_name.get(name)
        if seen is not None and seen.ready:
            continue
        if status is None and not outcome.error:
            continue  # not waited for: too few were left to wait for
        if seen is not None and seen.problem:
            why = seen.problem
        elif outcome.error:
            why = outcome.error
        elif status is not None and status.error:
            why = status.error
        else:
            why = "Ray started but the node did not join the head in time"
        missing.append((name, _without_name(name, why)))
    if len(missing) <= MISSING_ONE_BY_ONE:
        lines += [f"  {name}: {why}" for name, why in missing]
    else:
        # A thousand nodes that failed alike are one line, not a thousand.
        lines += render_failure_groups(group_nodes(missing), "missing")
    return "\n".join(lines)


def _without_name(name: str, why: str) -> str:
    """``why`` without a leading ``NAME: `` (rtk's errors name the node already)."""
    prefix = f"{name}: "
    return why[len(prefix) :] if why.startswith(prefix) else why
