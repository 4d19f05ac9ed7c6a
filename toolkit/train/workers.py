"""Ray Train's worker group for a run, from the cluster's totals, and whether it can fit.

How many workers (one per GPU, or one per node on CPU clusters, unless --num-workers
says otherwise), with what resources each, spread how, and how far an elastic group
may shrink (restart-excluding). ``train_config.json`` records it under ``layout``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from toolkit.json_types import JsonObject
from toolkit.ray_resources import NODE_RESOURCE
from toolkit.train.config import TrainConfig


@dataclass(frozen=True)
class WorkerLayout:
    """Ray Train's worker group (``ScalingConfig``), as ``train_config.json`` records it.

    Attributes:
        num_workers: The workers (ranks).
        resources_per_worker: The Ray resources each worker holds.
        use_gpu: Whether the workers train on GPUs.
        placement_strategy: ``STRICT_SPREAD`` (one CPU worker per node) or ``SPREAD``.
    """

    num_workers: int
    resources_per_worker: dict[str, float]
    use_gpu: bool
    placement_strategy: str
    min_workers: int | None = None

    @property
    def scaling_workers(self) -> int | tuple[int, int]:
        """Ray Train's ``num_workers``: a (min, max) range when the group is elastic."""
        if self.min_workers is None or self.min_workers >= self.num_workers:
            return self.num_workers
        return (self.min_workers, self.num_workers)

    def to_json(self) -> JsonObject:
        """The layout as ``train_config.json`` keeps it, under ``layout``."""
        return {
            "num_workers": self.num_workers,
            "resources_per_worker": {k: v for k, v in self.resources_per_worker.items()},
            "use_gpu": self.use_gpu,
            "placement_strategy": self.placement_strategy,
            **({"min_workers": self.min_workers} if self.min_workers is not None else {}),
        }


def worker_layout(config: TrainConfig, resources: Mapping[str, float], nodes: int) -> WorkerLayout:
    """How many workers, with what resources each, from the cluster's totals."""
    gpus = int(resources.get("GPU", 0))
    per_worker = dict(config.resources_per_worker) or ({"GPU": 1.0} if gpus else {"CPU": 1.0})
    if config.num_workers:
        count = config.num_workers
    elif per_worker.get("GPU"):
        count = max(1, int(gpus // per_worker["GPU"]))
    else:
        count = max(1, nodes)
    use_gpu = bool(per_worker.get("GPU"))
    # restart-excluding: the group may shrink with the nodes, down to min_nodes' share.
    min_workers = (
        max(1, math.ceil(count * config.min_nodes / nodes))
        if config.min_nodes and nodes and config.min_nodes < nodes
        else None
    )
    if min_workers is not None and not use_gpu and count <= nodes:
        # Ray Train sizes an elastic group by resources, not by placement: one worker a
        # node must ask for the one resource each node has, or 3 workers "fit" on 2
        # nodes' CPUs and the STRICT_SPREAD group waits for a third node forever.
        per_worker = {**per_worker, NODE_RESOURCE: 1.0}
    return WorkerLayout(
        num_workers=count,
        resources_per_worker=per_worker,
        use_gpu=use_gpu,
        # One worker per node on CPU clusters must stay one per node: after a node is
        # lost the restart waits for it rather than doubling up on a survivor. GPU
        # workers are held to their GPUs by the GPU resource itself.
        placement_strategy="STRICT_SPREAD" if not use_gpu and count <= nodes else "SPREAD",
        min_workers=min_workers,
    )


def placement_problem(layout: WorkerLayout, totals: Mapping[str, float]) -> str | None:
    """Why the cluster can never hold ``layout``'s workers; None when it can.

    Ray Train would otherwise wait for the resources until its start timeout
    (--restart-wait-s, ten minutes by default): a GPU asked of a CPU cluster, or more
    CPUs than all nodes have, is better said at once.
    """
    count = layout.num_workers
    for name, amount in layout.resources_per_worker.items():
        need, have = count * amount, totals.get(name, 0.0)
        if need > have:
            return (
                f"{count} worker(s) x {{{name!r}: {amount:g}}} need {need:g} {name} in all; "
                f"the cluster has {have:g}. Change --resources-per-worker or --num-workers "
                "(0: one per GPU, or one per node on CPU clusters)"
            )
    return None
