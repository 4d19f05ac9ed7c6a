"""Whether a Ray job carries rtk's source to the nodes, or the nodes run their own copy.

A job ships this machine's ``toolkit/`` as ``py_modules`` unless every node's Python
already imports the very same source. ``rtk up``'s probe digests the rtk each node
imports (``toolkit.node.common.source_digest``), and ``up`` keeps in the cluster's
state (``ClusterState.nodes_rtk_digest``) the digest every node shared, if they did;
each job after it compares that with the source it runs itself. Shipping costs each
node a download and an unpack before the job's first process, and every Ray Train
worker waits for it: seconds on a fresh cluster, which is every SLURM allocation.

What this trusts: that nobody replaces rtk on the nodes while the cluster runs. A
different rtk here (an upgrade since ``rtk up``) ships its own.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

import toolkit
from toolkit.json_types import JsonObject
from toolkit.node.common import source_digest
from toolkit.state.cluster_state import ClusterState


def package_dir() -> str:
    """This toolkit's source directory, shipped with jobs so nodes run the same code."""
    return str(Path(toolkit.__file__).parent)


@functools.cache
def local_digest() -> str:
    """The digest of the rtk source this process runs."""
    return source_digest(package_dir())


def code_env(ship: bool) -> JsonObject:
    """The runtime environment's part that brings rtk to the nodes (empty: not shipped)."""
    return {"py_modules": [package_dir()]} if ship else {}


def shared_digest(digests: Iterable[str | None]) -> str | None:
    """What ``up`` keeps in the state: this rtk's digest if every node had it, else None."""
    here = local_digest()
    seen = list(digests)
    return here if seen and all(d == here for d in seen) else None


def known_same(state: ClusterState | None) -> bool:
    """Whether the state says every node imports the very source this process runs."""
    return state is not None and state.nodes_rtk_digest == local_digest()
