"""Which nodes restart-excluding takes out, and what it does to each (no Ray needed for
nodes that did not answer: nothing is asked of them)."""

from __future__ import annotations

from toolkit.stall.node_exclusion import exclude_nodes, suspect_nodes, why_not_exclude
from toolkit.stall.records import StallRecord, Suspect


def test_suspect_nodes_come_once_each_most_likely_first() -> None:
    record = StallRecord(
        1.0,
        5,
        70.0,
        60.0,
        "stalled",
        suspects=(
            Suspect("node3", "did not answer"),
            Suspect("node2", "stopped", 4),
            Suspect("node3", "not found", 7),
        ),
    )
    assert suspect_nodes(record) == ["node3", "node2"]


def test_a_node_that_did_not_answer_is_left_to_ray() -> None:
    outcome = exclude_nodes(["node3"], {"node3": "id3"}, answered=["node1", "node2"])
    assert outcome == {"node3": "did not answer: Ray drops it when its health checks fail"}
    # A node Ray no longer lists is the same: nothing to ask there.
    assert exclude_nodes(["node4"], {}, answered=["node4"])["node4"].startswith("did not answer")


def test_a_restart_is_refused_where_it_could_never_start() -> None:
    nodes = ["node1", "node2", "node3"]
    assert why_not_exclude(["node3"], nodes, "node1", 2) is None
    # Ray already dropped node3: it is not among the nodes, two are left.
    assert why_not_exclude(["node3"], ["node1", "node2"], "node1", 2) is None
    assert why_not_exclude([], nodes, "node1", 2) == "no suspect to exclude"
    assert why_not_exclude(["node3"], nodes, "node1", 0) == "no room to shrink (min_nodes)"
    assert why_not_exclude(["node1"], nodes, "node1", 1) == (
        "the head node1 is a suspect, and the job runs there"
    )
    # Two suspects of three nodes with min_nodes 2: the group would wait for ever.
    assert why_not_exclude(["node2", "node3"], nodes, "node1", 2) == (
        "1 node(s) would be left of 3, fewer than min_nodes 2"
    )
