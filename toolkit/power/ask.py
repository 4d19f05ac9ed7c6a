"""The driver's side of the nodes' GPUs: set limits and read counters on every node at once.

Each ask is one Ray task pinned to each node (``toolkit.ray_fanout``), bounded in time:
it sets the limits the driver gives that node (``toolkit.power.node_power``), reads
every GPU's energy counter and limit, and, for the stragglers policy, its ranks' recent
waits (``toolkit.stall.slow.node_steps``) and which GPU each rank has (``rank_gpus``). A
node that does not answer in time is named, not waited for. ``RayPowerNodes`` is the
driver's; tests give the driver a model of their own with the same two methods.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

import ray

from toolkit.gpu.limits import GpuLimits, GpuRestore
from toolkit.power.node_power import NodePower, node_power, node_restore
from toolkit.ray_fanout import ask_nodes, pinned
from toolkit.rundir.layout import RunDir
from toolkit.stall.collect import error_line, ray_node_ids
from toolkit.stall.slow import RankSteps, node_steps

T = TypeVar("T")
PER_NODE_TIMEOUT_S = 20.0  # NVML's setters take tens of ms per GPU; a loaded node more
IN_FLIGHT = 64
_FIRST_LINE_BYTES = 4096


@dataclass(frozen=True)
class RankGpu:
    """Which GPU one rank of the node uses, as its markers say.

    Attributes:
        rank: The rank.
        local_rank: Its rank on the node.
        gpu_uuid: Its GPU's UUID (None: CUDA was not initialised when it wrote).
    """

    rank: int
    local_rank: int
    gpu_uuid: str | None


@dataclass(frozen=True)
class NodeReport:
    """One node's answer.

    Attributes:
        power: Its GPUs' counters and limits, and what could not be set.
        ranks: Its ranks' recent values at their collectives (asked for stragglers).
        rank_gpus: Its ranks' GPUs (asked for stragglers).
    """

    power: NodePower
    ranks: tuple[RankSteps, ...] = ()
    rank_gpus: tuple[RankGpu, ...] = ()


class PowerNodes(GpuLimits, Protocol):
    """The nodes, as the power driver reaches them: the GPU-limit interface, and reads."""

    def ask(
        self, limits_w: Mapping[str, Mapping[int, float]], run_dir: str | None
    ) -> dict[str, NodeReport | str]:
        """Set ``limits_w`` (node -> GPU index -> W; others read only) and read every node.

        With ``run_dir`` each node also reads its ranks' waits. A node that gave no
        answer maps to why, in one line.
        """
        ...

    def restore(self) -> dict[str, GpuRestore]:
        """Put back every node's limits; a node that gave no answer ``failed``, with why."""
        ...


def rank_gpus(run_dir: str, node: str) -> tuple[RankGpu, ...]:
    """The node's ranks' GPUs, from the first line of each of their marker files."""
    found: list[RankGpu] = []
    for path in RunDir(os.path.expanduser(run_dir)).marker_files():
        try:
            with path.open("rb") as f:
                line = json.loads(f.readline(_FIRST_LINE_BYTES))
            if line.get("node") != node:
                continue
            uuid = line.get("gpu_uuid")
            found.append(
                RankGpu(
                    int(line["rank"]),
                    int(line.get("local_rank") or 0),
                    uuid if isinstance(uuid, str) else None,
                )
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return tuple(sorted(found, key=lambda r: r.rank))


@ray.remote(num_cpus=0)
def _ask_node(
    node: str, owner: str, limits_w: dict[int, float] | None, run_dir: str | None
) -> NodeReport:
    power = node_power(node, owner, limits_w)
    if run_dir is None or not power.gpus:
        return NodeReport(power)
    return NodeReport(power, node_steps(run_dir, node).ranks, rank_gpus(run_dir, node))


@ray.remote(num_cpus=0)
def _restore_node(node: str, owner: str) -> GpuRestore:
    return node_restore(node, owner=owner)


class RayPowerNodes:
    """Every alive Ray node of the driver's cluster, asked through pinned tasks.

    Args:
        owner: Who sets the limits (the run): a node's restore file of another owner
            is not overwritten.
        per_node_timeout_s: How long each node may take to answer.
    """

    def __init__(self, owner: str, per_node_timeout_s: float = PER_NODE_TIMEOUT_S) -> None:
        self.owner = owner
        self.per_node_timeout_s = per_node_timeout_s
        self._asked: set[str] = set()  # nodes asked to set a limit: those restored

    def ask(
        self, limits_w: Mapping[str, Mapping[int, float]], run_dir: str | None
    ) -> dict[str, NodeReport | str]:
        """See ``PowerNodes.ask``."""
        nodes = ray_node_ids()
        self._asked.update(name for name, limits in limits_w.items() if limits)

        def submit(name: str) -> ray.ObjectRef[NodeReport]:
            limits = limits_w.get(name)
            task = _ask_node.options(scheduling_strategy=pinned(nodes[name]))
            return task.remote(name, self.owner, dict(limits) if limits else None, run_dir)

        return self._each(nodes, submit)

    def restore(self) -> dict[str, GpuRestore]:
        """See ``PowerNodes.restore``: the nodes that were asked to set a limit."""
        nodes = {k: v for k, v in ray_node_ids().items() if k in self._asked}
        missing = self._asked - set(nodes)

        def submit(name: str) -> ray.ObjectRef[GpuRestore]:
            task = _restore_node.options(scheduling_strategy=pinned(nodes[name]))
            return task.remote(name, self.owner)

        gone = (
            "not in the cluster now: its limits stay until `rtk profile --restore` "
            "or the next `rtk up`"
        )
        done = {name: GpuRestore(name, failed=f"{name}: {gone}") for name in missing}
        for name, answer in self._each(nodes, submit).items():
            done[name] = (
                GpuRestore(name, failed=f"{name}: {answer}") if isinstance(answer, str) else answer
            )
        return done

    def _each(
        self, nodes: Mapping[str, str], submit: Callable[[str], ray.ObjectRef[T]]
    ) -> dict[str, T | str]:
        """Every node's answer, or why it gave none in one line (``ray_fanout``)."""
        found: dict[str, T | str] = {}
        for answer in ask_nodes(nodes, submit, self.per_node_timeout_s, IN_FLIGHT):
            if answer.error is None and answer.value is not None:
                found[answer.key] = answer.value
            elif isinstance(answer.error, TimeoutError) or answer.error is None:
                found[answer.key] = f"did not answer within {self.per_node_timeout_s:g} s"
            else:
                found[answer.key] = error_line(answer.error)
        return found
