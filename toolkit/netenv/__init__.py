"""NCCL / IB / Gloo environment profiles and what the nodes' probes detect for them.

``choose_env`` (pure) turns a node's network facts into variables with reasons;
``toolkit.netenv.detect`` probes the nodes of a cluster for ``rtk env``.
"""

from __future__ import annotations

from toolkit.netenv.profiles import (
    FORBIDDEN,
    PROFILES,
    NetEnv,
    Setting,
    choose_env,
    describe_profile,
    env_for_node,
    inventory_overrides,
)

__all__ = [
    "FORBIDDEN",
    "PROFILES",
    "NetEnv",
    "Setting",
    "choose_env",
    "describe_profile",
    "env_for_node",
    "inventory_overrides",
]
