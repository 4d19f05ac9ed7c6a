"""The driver's side: which Ray node is which inventory node, and a failed node's one line.

The collection itself runs on a real Ray cluster in
``tests/integration/test_stall_collect.py``.
"""

from __future__ import annotations

from toolkit.ray_resources import alive_host_nodes as node_ids
from toolkit.stall.collect import RayNodes, collect_bound_s, error_line

# Trimmed records of ray.nodes(), as Ray 2 gives them.
RAY_NODES: list[dict[str, object]] = [
    {
        "NodeID": "a" * 56,
        "Alive": True,
        "NodeManagerHostname": "gpu-01",
        "Resources": {"CPU": 64.0, "GPU": 8.0, "rtk_host:node01": 1.0, "node:10.0.0.1": 1.0},
    },
    {
        "NodeID": "b" * 56,
        "Alive": True,
        "Resources": {"CPU": 64.0, "rtk_host:node02": 1.0},
    },
    {"NodeID": "c" * 56, "Alive": False, "Resources": {"rtk_host:node03": 1.0}},
    {"NodeID": "d" * 56, "Alive": True, "Resources": {"CPU": 1.0}},  # not rtk's
]


def test_inventory_names_map_to_the_alive_nodes_ray_knows() -> None:
    assert node_ids(RAY_NODES) == {"node01": "a" * 56, "node02": "b" * 56}
    assert node_ids([]) == {}
    assert node_ids([{"NodeID": "e", "Alive": True, "Resources": None}]) == {}


def test_a_failed_task_is_one_line_of_its_last_words() -> None:
    error = RuntimeError("Traceback (most recent call last):\n  File x\nOSError: disk gone\n")
    assert error_line(error) == "RuntimeError: OSError: disk gone"
    assert error_line(ValueError()) == "ValueError"
    assert len(error_line(ValueError("x" * 1000))) == 300


def test_the_bound_grows_with_the_windows_not_the_nodes() -> None:
    assert collect_bound_s(1, 10.0, 64) == 10.0
    assert collect_bound_s(64, 10.0, 64) == 10.0
    assert collect_bound_s(65, 10.0, 64) == 20.0
    assert collect_bound_s(1000, 10.0, 64) == 160.0


def test_a_node_ray_declared_dead_keeps_the_name_it_had_alive() -> None:
    """Ray's record of a dead node has no resources left, so no rtk name: the name seen
    while it was alive is kept, and the node comes back under a new id unnamed as lost."""
    nodes = RayNodes()
    assert nodes.see(RAY_NODES).lost == {}  # node03's dead record was never seen alive
    alive = {"NodeID": "e" * 56, "Alive": True, "Resources": {"rtk_host:node04": 1.0}}
    assert nodes.see([*RAY_NODES, alive]).alive["node04"] == "e" * 56
    dead = {
        "NodeID": "e" * 56,
        "Alive": False,
        "Resources": {},
        "DeathReasonMessage": "health check failed due to missing too many heartbeats",
    }
    now = nodes.see([*RAY_NODES, dead])
    assert now.lost == {
        "node04": "Ray lost the node (health check failed due to missing too many heartbeats)"
    }
    assert "node04" not in now.alive
    assert nodes.see([*RAY_NODES, {**dead, "DeathReasonMessage": ""}]).lost == {
        "node04": "Ray lost the node"
    }
    back = {"NodeID": "f" * 56, "Alive": True, "Resources": {"rtk_host:node04": 1.0}}
    assert nodes.see([*RAY_NODES, dead, back]).lost == {}
