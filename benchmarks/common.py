"""Pieces the benchmarks share."""

from __future__ import annotations

from toolkit.cluster.plan import NodePlan
from toolkit.shell import join


def bare_ray_start(node_plan: NodePlan, temp_dir: str, node_ip: str) -> str:
    """The plan's own `ray start` line without rtk: no env file, no token, the node IP given.

    The processes carry RTK_CLUSTER_DIR=temp_dir so rtk's node agent can stop them.
    """
    words = [
        f"--temp-dir={temp_dir}" if w.startswith("--temp-dir=") else w for w in node_plan.start_argv
    ]
    env = ["env", "RAY_AUTH_MODE=disabled", f"RTK_CLUSTER_DIR={temp_dir}"]
    return join([*env, *words, f"--node-ip-address={node_ip}"])
