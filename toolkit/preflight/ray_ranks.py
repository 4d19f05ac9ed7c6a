"""What the preflight's Ray jobs share: the inventory's nodes in Ray, and all-reduce ranks.

``alive_nodes`` finds the Ray node of each inventory node by the resource rtk gives
it (``toolkit.ray_resources.host_resource``), read once into a ``RayNode``;
``pinned`` places an actor or a task on one of them and nowhere else. ``Rank`` is one
rank of an all-reduce sweep and ``RankGroup`` one process group of them:
``start_sweeps`` starts several groups at once (each its own rendezvous), so that
groups on disjoint nodes run concurrently.

On a node, every GPU rank of a group sees all of the group's GPUs on that node (as
Ray Train arranges), so NCCL may use NVLink and P2P between them.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from toolkit.errors import ClusterError
from toolkit.fields import is_number
from toolkit.preflight.bandwidth import measure
from toolkit.ray_resources import host_resource

CALL_TIMEOUT_S = 300.0
RENDEZVOUS_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class RayNode:
    """What rtk uses of one inventory node's record in Ray (``ray.nodes()``).

    Attributes:
        name: The inventory node it is.
        node_id: Ray's id of the node: where ``pinned`` places work.
        address: The address Ray reaches it at (``NodeManagerAddress``): a TCP
            receiver's, an all-reduce rendezvous's.
        resources: Ray's resources on it (``CPU``, ``GPU``, rtk's own per host).
    """

    name: str
    node_id: str
    address: str
    resources: Mapping[str, float] = field(default_factory=dict)

    @property
    def gpu_count(self) -> int:
        """How many whole GPUs Ray knows on the node."""
        return int(self.resources.get("GPU", 0))

    @classmethod
    def from_ray(cls, name: str, node: Mapping[str, object]) -> RayNode:
        """The node from its record in ``ray.nodes()``.

        Raises:
            ClusterError: The record lacks its id, address or resources.
        """
        node_id, address = node.get("NodeID"), node.get("NodeManagerAddress")
        resources = node.get("Resources")
        if not (
            isinstance(node_id, str) and isinstance(address, str) and isinstance(resources, Mapping)
        ):
            raise ClusterError(
                f"Ray's record of {name} lacks NodeID, NodeManagerAddress or Resources: {node!r}"
            )
        amounts = {str(key): float(value) for key, value in resources.items() if is_number(value)}
        return cls(name, node_id, address, amounts)


def alive_nodes(names: Sequence[str]) -> dict[str, RayNode]:
    """Inventory name -> its Ray node, for the named nodes that are alive.

    Raises:
        ClusterError: Ray's record of a named node lacks what rtk uses of it.
    """
    wanted = {host_resource(name): name for name in names}
    found: dict[str, RayNode] = {}
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        if not isinstance(node, Mapping) or not node.get("Alive"):
            continue
        for resource in node.get("Resources") or {}:
            if resource in wanted:
                found[wanted[resource]] = RayNode.from_ray(wanted[resource], node)
    return found


def pinned(node: RayNode) -> NodeAffinitySchedulingStrategy:
    """Run on ``node`` only: never elsewhere, even when it has no room."""
    return NodeAffinitySchedulingStrategy(node.node_id, soft=False)


def error_text(e: BaseException, limit: int = 300) -> str:
    """An exception in one line: its type and the last line of its message."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[-1][:limit]}" if lines else type(e).__name__


@ray.remote(num_cpus=0, max_restarts=0)
class Rank:
    """One rank of an all-reduce sweep."""

    def gpu_ids(self) -> list[str]:
        """The GPUs Ray gave this actor."""
        return [str(i) for i in ray.get_gpu_ids()]

    def free_port(self) -> int:
        """A port free on this node now, for the rendezvous."""
        with socket.socket() as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def sweep(
        self,
        rank: int,
        world: int,
        init_method: str,
        visible: str | None,
        local_index: int,
        sizes_bytes: list[int],
    ) -> list[dict[str, float]]:
        """Join the process group and time the all-reduces."""
        if visible is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
        import torch
        import torch.distributed as dist

        gpu = visible is not None
        device = torch.device(f"cuda:{local_index}" if gpu else "cpu")
        if gpu:
            torch.cuda.set_device(device)
        dist.init_process_group(
            "nccl" if gpu else "gloo",
            init_method=init_method,
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=RENDEZVOUS_TIMEOUT_S),
        )
        try:
            return measure.allreduce_sweep(dist, torch, device, sizes_bytes)
        finally:
            dist.destroy_process_group()


@dataclass
class RankGroup:
    """The ranks of one process group, in rank order.

    Attributes:
        ranks: (inventory node name, Rank actor) per rank.
        master: The address rank 0's node is reached at: the rendezvous.
        use_gpus: One GPU per rank (NCCL), else CPU ranks (gloo).
        sizes_bytes: The all-reduce sizes to time.
    """

    ranks: list[tuple[str, Any]]
    master: str
    use_gpus: bool
    sizes_bytes: tuple[int, ...]

    @classmethod
    def place(
        cls,
        nodes: Mapping[str, RayNode],
        counts: Sequence[tuple[str, int]],
        use_gpus: bool,
        sizes_bytes: Sequence[int],
    ) -> RankGroup:
        """Start ``count`` Rank actors pinned to each node named (one GPU each with GPUs)."""
        ranks = [
            (
                name,
                Rank.options(  # type: ignore[attr-defined]
                    scheduling_strategy=pinned(nodes[name]), num_gpus=1 if use_gpus else 0
                ).remote(),
            )
            for name, count in counts
            for _ in range(count)
        ]
        master = nodes[counts[0][0]].address if counts else ""
        return cls(ranks, master, use_gpus, tuple(sizes_bytes))

    @property
    def backend(self) -> str:
        """The backend: nccl or gloo."""
        return "nccl" if self.use_gpus else "gloo"

    def kill(self) -> None:
        """End every rank's actor."""
        for _, actor in self.ranks:
            ray.kill(actor)


def start_sweeps(groups: Sequence[RankGroup], timeout_s: float = CALL_TIMEOUT_S) -> list[Any]:
    """Start every group's sweep at once; per group its ranks' result refs, or an error.

    A group whose actors do not start within ``timeout_s`` (all groups share it) is an
    error string; the others still start.
    """
    asked = [
        ([actor.gpu_ids.remote() for _, actor in g.ranks], g.ranks[0][1].free_port.remote())
        for g in groups
    ]
    deadline = time.monotonic() + timeout_s
    started: list[Any] = []
    for group, (id_refs, port_ref) in zip(groups, asked, strict=True):
        try:
            ids = ray.get(id_refs, timeout=max(1.0, deadline - time.monotonic()))
            port = ray.get(port_ref, timeout=max(1.0, deadline - time.monotonic()))
        except Exception as e:  # noqa: BLE001 - a group that cannot start is its result
            started.append(error_text(e))
            continue
        started.append(_sweep_refs(group, ids, f"tcp://{group.master}:{port}"))
    return started


def _sweep_refs(group: RankGroup, ids: list[list[str]], init: str) -> list[Any]:
    visible: dict[str, list[str]] = {}
    for (name, _), own in zip(group.ranks, ids, strict=True):
        visible.setdefault(name, []).extend(own)
    refs = []
    world = len(group.ranks)
    for rank, ((name, actor), own) in enumerate(zip(group.ranks, ids, strict=True)):
        shown = sorted(visible[name], key=lambda i: (len(i), i))
        index = shown.index(own[0]) if group.use_gpus else 0
        refs.append(
            actor.sweep.remote(
                rank,
                world,
                init,
                ",".join(shown) if group.use_gpus else None,
                index,
                list(group.sizes_bytes),
            )
        )
    return refs
