"""Every node's torchrun, from the head: the ``rtk torchrun`` driver's workload.

``TorchrunNodes`` pins one ``TorchrunNode`` actor to every alive node of the cluster and
asks each for its facts; ``problems`` says why the run cannot start (one line per
cause, nodes grouped; nothing started). ``run`` starts torchrun everywhere at once and
waits: the first node whose torchrun fails ends the others, and the exit status is the
first failure's, 0 when every node's succeeded. ``stop`` ends torchrun on every node
(a stall the policy aborts, a signal to the driver).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from toolkit.cluster.node_groups import group_nodes
from toolkit.torchrun.node_runner import NodeFacts, TorchrunActor
from toolkit.torchrun.spec import TorchrunSpec, node_argv, nproc_for, nproc_problem

FACTS_TIMEOUT_S = 120.0
STOP_WAIT_S = 30.0
LOG_SETTLE_S = 1.0  # node_runner.STOP_GRACE_S and some
FAILURE_TIMEOUT_S = 5.0

Actor = Any  # a TorchrunNode actor handle (Ray's handles are untyped)


def problems(spec: TorchrunSpec, facts: Sequence[NodeFacts], gpus: Sequence[int]) -> list[str]:
    """Why the run cannot start, one line per cause (nodes grouped), or none."""
    lines = []
    missing = [f.node for f in facts if not f.script_found]
    if missing:
        where = group_nodes([(n, "") for n in missing])[0].hostlist()
        lines.append(
            f"{spec.script}: no such file on {len(missing)} node(s) ({where}); it is looked "
            "for in the job's working directory (--working-dir, shipped to every node)"
        )
    head = facts[0]
    if head.port_taken:
        lines.append(
            f"the rendezvous port {spec.rdzv_port} on the head {head.node} ({head.ip}) is in "
            "use by another process; stop it, or pick a free port (--rdzv-port, or "
            "ports.rendezvous in the inventory)"
        )
    for fact, count in zip(facts, gpus, strict=True):
        why = nproc_problem(spec, fact.node, count)
        if why is not None:
            lines.append(why)
            break
    return lines


def outcome(names: list[str], codes: dict[int, int]) -> str:
    """Every node's exit status in one line, alike nodes grouped."""
    groups = group_nodes([(names[i], f"exited {codes[i]}") for i in sorted(codes)])
    return "; ".join(f"{g.count} node(s) {g.text} ({g.hostlist()})" for g in groups)


class TorchrunNodes:
    """torchrun on every alive node of the cluster, together (see the module).

    Args:
        spec: The request.
        env: rtk's variables for every rank (``RTK_RUN_DIR``).
        say: Prints one of rtk's lines in the job's log.
    """

    def __init__(self, spec: TorchrunSpec, env: dict[str, str], say: Callable[[str], None]) -> None:
        self.spec, self.env, self.say = spec, env, say
        head_id = ray.get_runtime_context().get_node_id()
        alive = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
        nodes = sorted(alive, key=lambda n: (n["NodeID"] != head_id, n["NodeManagerAddress"]))
        self.actors: list[Actor] = [
            TorchrunActor.options(
                max_concurrency=4,
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
            ).remote()
            for n in nodes
        ]
        self.facts: list[NodeFacts] = ray.get(
            [
                a.facts.remote(spec.script, not spec.module, spec.rdzv_port if i == 0 else None)
                for i, a in enumerate(self.actors)
            ],
            timeout=FACTS_TIMEOUT_S,
        )
        self.gpus = [int(n.get("Resources", {}).get("GPU", 0)) for n in nodes]
        self.stopping = threading.Event()

    def problems(self) -> list[str]:
        """Why the run cannot start on these nodes (none: it can)."""
        return problems(self.spec, self.facts, self.gpus)

    def run(self) -> int:
        """Start torchrun on every node, wait for all; the first failure's status."""
        head_ip = self.facts[0].ip
        nprocs = [nproc_for(self.spec, count) for count in self.gpus]
        # Every node starts at once: one round trip to all of them, not one after another.
        ray.get(
            [
                actor.start.remote(
                    node_argv(self.spec, len(self.actors), head_ip, nproc, is_host=index == 0),
                    self.env,
                    dict(self.spec.env),
                )
                for index, (actor, nproc) in enumerate(zip(self.actors, nprocs, strict=True))
            ]
        )
        self.say(
            f"torchrun started on {len(self.actors)} node(s), {sum(nprocs)} rank(s); "
            f"rendezvous {head_ip}:{self.spec.rdzv_port}"
        )
        codes, first_failure = self._wait_all()
        # Ray forwards a worker's output from its log file a moment after it is written:
        # the last lines (a failed rank's traceback, torchrun's error summary) come first.
        time.sleep(LOG_SETTLE_S)
        self.say(outcome([f.node for f in self.facts], codes))
        failed = (
            first_failure
            if first_failure is not None
            else next((i for i in sorted(codes) if codes[i] != 0), None)
        )
        if failed is None:
            return 0
        return codes[failed] if codes[failed] > 0 else 1  # killed by a signal: 1

    def stop(self) -> None:
        """End torchrun on every node."""
        if not self.stopping.is_set():
            self.stopping.set()
            self.say(f"stopping torchrun on {len(self.actors)} node(s)")
        _stop(self.actors)

    def _wait_all(self) -> tuple[dict[int, int], int | None]:
        """Every node's exit status, and the first node that failed (it stops the others)."""
        waits: dict[Any, int] = {a.wait.remote(): i for i, a in enumerate(self.actors)}
        codes: dict[int, int] = {}
        first_failure: int | None = None
        while waits:
            ready, _ = ray.wait(list(waits), num_returns=1)
            for ref in ready:
                index = waits.pop(ref)
                codes[index] = ray.get(ref)
                if codes[index] != 0 and first_failure is None and not self.stopping.is_set():
                    first_failure = index
                    why = _failure(self.actors[index])
                    self.say(
                        f"torchrun on {self.facts[index].node} exited {codes[index]}"
                        f"{': ' + why if why else ''}; stopping the other nodes"
                    )
                    _stop(self.actors[i] for i in waits.values())
        return codes, first_failure


def _failure(actor: Actor) -> str | None:
    """The node's first failed rank in one line (None: none said, or no answer in time)."""
    try:
        found = ray.get(actor.failure.remote(), timeout=FAILURE_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - the failure is told without it
        return None
    return found if isinstance(found, str) else None


def _stop(actors: Iterable[Actor]) -> None:
    refs = [a.stop.remote() for a in actors]
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=STOP_WAIT_S)
