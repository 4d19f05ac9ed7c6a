"""The error of a bring-up that fell short: each missing node's cause, at any N."""

from __future__ import annotations

from pathlib import Path

from toolkit.cluster.plan import build_plan
from toolkit.cluster.ray_status import ClusterStatus, NodeStatus
from toolkit.inventory.loader import parse_inventory
from toolkit.lifecycle.failures.missing import MISSING_ONE_BY_ONE, missing_text
from toolkit.lifecycle.node_start import NodeOutcome


def plan_of(nodes: int, tmp_path: Path):  # type: ignore[no-untyped-def]
    lines = [f"  - host: n{i:04}\n    address: 10.0.{i // 250}.{i % 250 + 1}" for i in range(nodes)]
    text = "cluster: c\nray:\n  auth: none\nnodes:\n" + "\n".join(lines) + "\n"
    return build_plan(parse_inventory(text, "c.yaml", tmp_path))


def test_a_few_missing_nodes_get_a_line_each_without_their_name_twice(tmp_path: Path) -> None:
    plan = plan_of(4, tmp_path)
    outcomes = {n.name: NodeOutcome(n.name, n.role, "started") for n in plan.nodes}
    outcomes["n0001"].error = "n0001: SSH to 10.0.0.2 timed out"
    outcomes["n0002"].error = "Ray's temp dir /tmp/x has 0 B free (ext4 at /)"
    status = ClusterStatus(
        "c",
        "http://x",
        [
            NodeStatus("n0000", "head", "10.0.0.1", alive=True),
            NodeStatus("n0001", "worker", "10.0.0.2"),
            NodeStatus("n0002", "worker", "10.0.0.3"),
            NodeStatus("n0003", "worker", "10.0.0.4", alive=True, problem="joined without GPUs"),
        ],
    )
    assert missing_text(plan, outcomes, status, 4).splitlines() == [
        "cluster c: fewer than min_nodes=4 node(s) came up",
        "  n0001: SSH to 10.0.0.2 timed out",
        "  n0002: Ray's temp dir /tmp/x has 0 B free (ext4 at /)",
        "  n0003: joined without GPUs",
    ]


def test_many_nodes_failing_alike_are_one_line(tmp_path: Path) -> None:
    plan = plan_of(200, tmp_path)
    outcomes = {n.name: NodeOutcome(n.name, n.role, "failed") for n in plan.nodes}
    for name, outcome in list(outcomes.items())[1:]:
        outcome.error = f"{name}: Ray 2.59.0 here, 2.60.0 on the head n0000"
    text = missing_text(plan, outcomes, None, 200).splitlines()
    assert text == [
        "cluster c: fewer than min_nodes=200 node(s) came up",
        "missing: 199 node(s), 1 cause(s)",
        "    199 node(s) n[0001-0199]: Ray 2.59.0 here, 2.60.0 on the head n0000",
    ]
    assert len(text) < MISSING_ONE_BY_ONE
