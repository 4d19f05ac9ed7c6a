"""The driver's side of a stall's evidence: every node asked at once, each within its time.

The job driver (on the head, connected to Ray) runs ``node_evidence`` on every node of
the run, a task pinned to each (``toolkit.ray_fanout``), ``in_flight`` at a time. A
node that does not answer within ``per_node_timeout_s`` is itself evidence: its
``NodeEvidence`` says so, and nothing waits for it longer; a task that fails gives its
error in one line. A rank's stack gets a fifth of the node's time, so a node's 72
ranks, read 32 at a time, still answer within it. Every node is given the same
request id for its ranks' Flight Recorders (``flight.dumps``).

A node is asked through its warm ``EvidenceTaker`` when the watchdog started one
(``EvidenceTakers.warm``: once no step has come for half the timeout), else through
a task. A task needs a worker process started on the node, with the job's runtime
environment, and on a node whose cores are busy that start alone can take longer
than the node's whole time; a taker started before the stall has paid it already.

A node Ray has declared dead is not asked: Ray's record of it keeps no resources, so
no name either. This process remembers the name each node id had while it was alive
(``RayNodes``), and such a node's evidence says that Ray lost it and why.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import ray

from toolkit.ray_fanout import ask_nodes, pinned
from toolkit.ray_resources import alive_host_nodes
from toolkit.stall.flight.ras import RAS_NODES
from toolkit.stall.node_evidence import node_evidence
from toolkit.stall.records import RAY_LOST, NodeEvidence
from toolkit.stall.settings import PER_NODE_TIMEOUT_S

IN_FLIGHT = 64
TAKER_CONCURRENCY = 4
_ERROR_CHARS = 300


@ray.remote(num_cpus=0)
def _node_evidence(
    run_dir: str, node: str, stack_timeout_s: float, flight_request: str, ras: bool
) -> NodeEvidence:
    """``node_evidence`` on the node this task runs on."""
    return node_evidence(run_dir, node, stack_timeout_s, flight_request=flight_request, ras=ras)


@ray.remote(num_cpus=0)
class EvidenceTaker:
    """A worker kept on one node to take its evidence the moment a stall is declared.

    Threaded (``TAKER_CONCURRENCY`` calls at once): a collection that hangs on the node (its time
    past, the driver gone on) does not hold the next one back.
    """

    def take(
        self, run_dir: str, node: str, stack_timeout_s: float, flight_request: str, ras: bool
    ) -> NodeEvidence:
        """``node_evidence`` on this node."""
        return node_evidence(run_dir, node, stack_timeout_s, flight_request=flight_request, ras=ras)


class EvidenceTakers:
    """One ``EvidenceTaker`` per Ray node, started ahead of a stall (see the module).

    Each costs its node one idle worker process (no CPU reserved) for the rest of
    the run; a node without one is asked through a task.
    """

    def __init__(self) -> None:
        self._actors: dict[str, Any] = {}  # Ray node id -> its taker

    def warm(self, node_ids: Iterable[str]) -> int:
        """Start a taker on each node that has none; how many were started."""
        started = 0
        for node_id in node_ids:
            if node_id not in self._actors:
                taker = EvidenceTaker.options(  # type: ignore[attr-defined]
                    scheduling_strategy=pinned(node_id), max_concurrency=TAKER_CONCURRENCY
                )
                self._actors[node_id] = taker.remote()
                started += 1
        return started

    @property
    def node_ids(self) -> tuple[str, ...]:
        """The nodes with a taker, in the order they were started."""
        return tuple(self._actors)

    def ask(
        self,
        node_id: str,
        run_dir: str,
        node: str,
        stack_timeout_s: float,
        request: str,
        ras: bool = False,
    ) -> ray.ObjectRef[NodeEvidence] | None:
        """The node's taker asked for its evidence (None: the node has none).

        A taker still starting is asked all the same: its start began before the
        stall, and a task would start a worker of its own from nothing.
        """
        actor = self._actors.get(node_id)
        if actor is None:
            return None
        ref: ray.ObjectRef[NodeEvidence] = actor.take.remote(
            run_dir, node, stack_timeout_s, request, ras
        )
        return ref

    def close(self) -> None:
        """Stop every taker (they would end with the job anyway)."""
        actors, self._actors = self._actors, {}
        for actor in actors.values():
            with contextlib.suppress(Exception):  # its node may be gone already
                ray.kill(actor)


def collect_evidence(
    nodes: Mapping[str, str],
    run_dir: str,
    per_node_timeout_s: float = PER_NODE_TIMEOUT_S,
    in_flight: int = IN_FLIGHT,
    takers: EvidenceTakers | None = None,
) -> list[NodeEvidence]:
    """Every node's evidence, in the order of ``nodes``; never raises for a node.

    Args:
        nodes: Inventory node name -> its Ray node id (``ray_node_ids``).
        run_dir: The run directory, as the nodes see it.
        per_node_timeout_s: How long each node may take to answer.
        in_flight: How many nodes are asked at once.
        takers: The nodes' warm takers, where the caller started them.

    Returns:
        One ``NodeEvidence`` per node; one that did not answer carries its error.
    """
    stack_timeout_s = per_node_timeout_s / 5
    # One id for the whole collection: a run directory every node shares is asked once.
    flight_request = uuid.uuid4().hex[:12]
    # NCCL RAS's view is the whole job's: asked of the first few nodes only.
    ras_nodes = set(list(nodes)[:RAS_NODES])

    def ask(name: str) -> ray.ObjectRef[NodeEvidence]:
        ras = name in ras_nodes
        if takers is not None:
            asked = takers.ask(nodes[name], run_dir, name, stack_timeout_s, flight_request, ras)
            if asked is not None:
                return asked
        task = _node_evidence.options(scheduling_strategy=pinned(nodes[name]))
        return task.remote(run_dir, name, stack_timeout_s, flight_request, ras)

    found: dict[str, NodeEvidence] = {}
    for answer in ask_nodes(nodes, ask, per_node_timeout_s, max(1, in_flight)):
        if isinstance(answer.value, NodeEvidence):
            found[answer.key] = answer.value
            continue
        error = answer.error
        if isinstance(error, TimeoutError) or error is None:
            text = f"did not answer within {per_node_timeout_s:g} s"
        else:
            text = error_line(error)
        found[answer.key] = NodeEvidence(answer.key, error=text, elapsed_s=answer.elapsed_s)
    return [found[name] for name in nodes]


def collect_bound_s(nodes: int, per_node_timeout_s: float, in_flight: int) -> float:
    """The longest ``collect_evidence`` waits for its answers (its own work aside)."""
    return per_node_timeout_s * math.ceil(nodes / max(1, in_flight))


def error_line(error: BaseException) -> str:
    """An exception in one line: its type and its message's last line (Ray's are long)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    text = f"{type(error).__name__}: {lines[-1]}" if lines else type(error).__name__
    return text[:_ERROR_CHARS]


@dataclass(frozen=True)
class RayNodesNow:
    """The run's nodes as Ray sees them now.

    Attributes:
        alive: Inventory node name -> Ray node id, of the alive nodes.
        lost: Inventory node name -> why, of the nodes Ray declared dead (and that did
            not come back under a new id).
    """

    alive: dict[str, str]
    lost: dict[str, str]


class RayNodes:
    """The names of Ray's nodes, remembered while they are alive (see the module)."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}  # node id -> inventory name

    def see(self, listing: Iterable[Mapping[str, object]]) -> RayNodesNow:
        """The nodes of ``ray.nodes()``'s ``listing``; remembers the alive ones' names."""
        listing = list(listing)
        alive = alive_host_nodes(listing)
        self._names.update({node_id: name for name, node_id in alive.items()})
        lost: dict[str, str] = {}
        for node in listing:
            name = self._names.get(str(node.get("NodeID")))
            if node.get("Alive") or name is None or name in alive:
                continue
            why = str(node.get("DeathReasonMessage") or "").strip()
            lost[name] = f"{RAY_LOST} ({why})" if why else RAY_LOST
        return RayNodesNow(alive, lost)


_SEEN = RayNodes()  # this process's memory of the names


def ray_nodes_now() -> RayNodesNow:
    """The alive and the lost nodes of this driver's Ray now."""
    return _SEEN.see(ray.nodes())  # type: ignore[no-untyped-call]


def ray_node_ids() -> dict[str, str]:
    """Inventory node name -> Ray node id, of the alive nodes of this driver's Ray now."""
    return ray_nodes_now().alive
