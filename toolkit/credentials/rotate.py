"""``rtk up --rotate-credentials``: a new token, CA and certificates, on a stopped cluster.

Nodes accept only the token and CA they started with, so new ones on a running
cluster would lock its nodes out of each other, and the clients out of it. Rotation
therefore refuses while this cluster's Ray answers on any node; after it, ``rtk up``
makes and sends the new ones as on a first bring-up.
"""

from __future__ import annotations

from toolkit.cluster.plan import ClusterPlan
from toolkit.cluster.progress_reporter import Reporter
from toolkit.cluster.ray_status import cluster_status
from toolkit.errors import ClusterError
from toolkit.state.store import StateStore
from toolkit.transport.base import Transport


def running_refusal(plan: ClusterPlan, alive: list[str]) -> str:
    """The message of a rotation refused because ``alive`` nodes run this cluster's Ray."""
    shown = ", ".join(alive[:8]) + (f" and {len(alive) - 8} more" if len(alive) > 8 else "")
    return (
        f"cluster {plan.inventory.name} is running (Ray alive on {shown}): new credentials "
        "would lock its nodes out of each other. Stop it first (rtk down), then rtk up "
        "--rotate-credentials"
    )


def rotate_credentials(
    plan: ClusterPlan, transport: Transport, store: StateStore, reporter: Reporter
) -> None:
    """Forget the cluster's token, CA and certificates here, when its Ray runs nowhere.

    Raises:
        ClusterError: This cluster's Ray answers on the head, for some node.
        StateError: The old credentials cannot be removed.
    """
    status = cluster_status(plan, transport)
    alive = [n.name for n in status.nodes if n.alive]
    if alive:
        raise ClusterError(running_refusal(plan, alive))
    store.forget_credentials()
    reporter.info("credentials rotated: a new token, CA and certificates for every node")
