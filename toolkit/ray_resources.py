"""Names rtk gives Ray, shared by the host and the code that runs under Ray.

Kept apart from ``toolkit.cluster`` so that Ray jobs on the nodes can use them without
loading the host's side (transports, fabric).
"""

from __future__ import annotations

HOST_RESOURCE_PREFIX = "rtk_host:"


def host_resource(node_name: str) -> str:
    """The custom Ray resource that marks a node as inventory node ``node_name``."""
    return f"{HOST_RESOURCE_PREFIX}{node_name}"


NODE_RESOURCE = "rtk_node"
"""One of it on every node rtk starts: a worker that asks for one is alone on its node,
and Ray counts the nodes it could hold by it (Ray Train's elastic worker group does)."""
