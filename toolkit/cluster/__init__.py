"""Cluster lifecycle: plan, bring-up, status, teardown, and rtk's local state."""

from __future__ import annotations

from toolkit.cluster.down import DownResult, down
from toolkit.cluster.plan import ClusterPlan, build_plan
from toolkit.cluster.render import render_down, render_down_summary, render_up, render_up_summary
from toolkit.cluster.report import Reporter
from toolkit.cluster.state import StateStore
from toolkit.cluster.status import ClusterStatus, cluster_status
from toolkit.cluster.up import UpResult, up

__all__ = [
    "ClusterPlan",
    "ClusterStatus",
    "DownResult",
    "Reporter",
    "StateStore",
    "UpResult",
    "build_plan",
    "cluster_status",
    "down",
    "render_down",
    "render_down_summary",
    "render_up",
    "render_up_summary",
    "up",
]
