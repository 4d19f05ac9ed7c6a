"""Names rtk gives Ray, shared by the host and the code that runs under Ray.

Kept apart from ``toolkit.cluster`` so that Ray jobs on the nodes can use them without
loading the host's side (transports, fabric).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

HOST_RESOURCE_PREFIX = "rtk_host:"


def host_resource(node_name: str) -> str:
    """The custom Ray resource that marks a node as inventory node ``node_name``."""
    return f"{HOST_RESOURCE_PREFIX}{node_name}"


NODE_RESOURCE = "rtk_node"
"""One of it on every node rtk starts: a worker that asks for one is alone on its node,
and Ray counts the nodes it could hold by it (Ray Train's elastic worker group does)."""


def host_name(resources: object) -> str | None:
    """The inventory name a Ray node's resources mark it as (its ``rtk_host:NAME``)."""
    for key in resources if isinstance(resources, Mapping) else {}:
        if isinstance(key, str) and key.startswith(HOST_RESOURCE_PREFIX):
            return key[len(HOST_RESOURCE_PREFIX) :]
    return None


def alive_host_nodes(ray_nodes: Iterable[Mapping[str, object]]) -> dict[str, str]:
    """Inventory node name -> Ray node id, of the alive nodes rtk marked.

    Args:
        ray_nodes: ``ray.nodes()``.
    """
    found: dict[str, str] = {}
    for node in ray_nodes:
        name = host_name(node.get("Resources")) if node.get("Alive") else None
        if name is not None:
            found[name] = str(node.get("NodeID"))
    return found
