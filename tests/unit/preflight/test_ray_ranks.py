"""The preflight jobs' view of Ray's nodes: what rtk reads of ``ray.nodes()``, read once."""

from __future__ import annotations

import pytest

from toolkit.errors import ClusterError
from toolkit.preflight.ray_ranks import RayNode, pinned
from toolkit.ray_resources import host_resource

# One entry of ray.nodes() (Ray 2.x), as a job driver on the head sees it.
RAY_NODE: dict[str, object] = {
    "NodeID": "8d3c1e0f5b2a4c6e9f1d7a3b5c8e2f4a6b9c1d3e5f7a9b2c4d6e8f0a",
    "Alive": True,
    "NodeManagerAddress": "10.0.0.12",
    "NodeManagerHostname": "gpu-node-2",
    "NodeManagerPort": 38123,
    "ObjectManagerPort": 8076,
    "Resources": {
        "CPU": 96.0,
        "GPU": 8.0,
        "memory": 1.2e12,
        "node:10.0.0.12": 1.0,
        host_resource("gpu-node-2"): 1.0,
    },
    "Labels": {"ray.io/node_id": "8d3c1e0f"},
}


def test_a_ray_node_is_read_once_into_what_rtk_uses() -> None:
    node = RayNode.from_ray("gpu-node-2", RAY_NODE)
    assert node.name == "gpu-node-2"
    assert node.node_id == RAY_NODE["NodeID"]
    assert node.address == "10.0.0.12"
    assert node.gpu_count == 8
    assert node.resources["CPU"] == 96.0
    assert pinned(node).node_id == node.node_id and pinned(node).soft is False


def test_a_node_without_gpus_or_with_a_fraction_counts_whole_gpus() -> None:
    cpu_only = {**RAY_NODE, "Resources": {"CPU": 4.0}}
    assert RayNode.from_ray("cpu1", cpu_only).gpu_count == 0
    shared = {**RAY_NODE, "Resources": {"GPU": 1.5}}
    assert RayNode.from_ray("g", shared).gpu_count == 1


@pytest.mark.parametrize("key", ["NodeID", "NodeManagerAddress", "Resources"])
def test_a_record_lacking_what_rtk_uses_names_the_node(key: str) -> None:
    broken = {k: v for k, v in RAY_NODE.items() if k != key}
    with pytest.raises(ClusterError, match="Ray's record of gpu-node-2 lacks"):
        RayNode.from_ray("gpu-node-2", broken)
