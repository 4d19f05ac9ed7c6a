"""A simulated cluster and the transport that reaches it: rtk at any node count, no nodes.

``SimulatedCluster`` (``cluster``) is the nodes' side: which run this cluster's Ray,
the files rtk put there, and Ray's own view of the cluster (a node registers with the
head when its ``ray start`` has finished, later for a late joiner).
``SimulatedTransport`` (``transport``) is one command's way to it, as the SSH transport
is: one connection per node, opened on first use at the cost of a handshake and reused
for every step after. Everything else is rtk's own: the planner, the executor, the wait
loop (its question to Ray is the node agent's ``status``, answered here from the view
in Ray's JSON), preflight and teardown.

Each operation takes its time from a ``LatencyModel`` (``scenario``) in model seconds,
slept for real after scaling (``scale`` 0.01 runs a 5 s ``ray start`` in 50 ms).
``Faults`` picks nodes that cannot be reached, whose ``ray start`` fails, or that join
late, and Ray ports that preflight's connections find closed on a node or cut between
two.

    cluster = SimulatedCluster(LatencyModel(worker_start_s=5, scale=0.01))
    with SimulatedTransport(cluster) as transport:
        ...  # anything that takes a Transport
"""

from __future__ import annotations

from toolkit.simulation.node_side import SimulatedCluster
from toolkit.simulation.scenario import Faults, LatencyModel, pick_nodes
from toolkit.simulation.transport import SimulatedTransport, is_ray_start

__all__ = [
    "Faults",
    "LatencyModel",
    "SimulatedCluster",
    "SimulatedTransport",
    "is_ray_start",
    "pick_nodes",
]
