"""The driver of ``rtk torchrun``, on the head: torchrun on every node, together.

``python -m toolkit.torchrun.fanout SPEC_JSON`` runs as the command of rtk's telemetry
job (``toolkit.telemetry.record_job``: the samplers run around it, the ranks' marker
files are gathered and the report built after it). It pins one ``TorchrunNode`` actor
to every alive node of the cluster, asks each for its facts and refuses to start when
one lacks the script or the head's rendezvous port is taken (one line each, nothing
started), then starts torchrun everywhere. The first node whose torchrun fails ends
the others; SIGTERM or SIGINT (``rtk stop``, Ctrl-C) ends them all. It exits with the
first failure's status, 0 when every node's torchrun succeeded. Meanwhile the stall
watchdog (``toolkit.stall.watchdog``) follows the head's ranks' markers; on a stall it
names the suspects, and ``--on-stall abort`` stops every node (exit ``STALL_EXIT``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from types import FrameType
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from toolkit.cluster.node_groups import group_nodes
from toolkit.power.driver import power_driver
from toolkit.stall.settings import STALL_EXIT
from toolkit.stall.watchdog import Watchdog, run_dir_from_env
from toolkit.torchrun.node_runner import NodeFacts, TorchrunActor
from toolkit.torchrun.spec import TorchrunSpec, node_argv, nproc_for, nproc_problem

FACTS_TIMEOUT_S = 120.0
STOP_WAIT_S = 30.0
LOG_SETTLE_S = 1.0  # node_runner.STOP_GRACE_S and some
EXIT_CANNOT_START = 3
_PREFIX = "rtk torchrun:"

Actor = Any  # a TorchrunNode actor handle (Ray's handles are untyped)


def say(line: str) -> None:
    """A line of rtk's own in the job's log."""
    print(f"{_PREFIX} {line}", flush=True)


def _alive_nodes() -> list[dict[str, Any]]:
    head_id = ray.get_runtime_context().get_node_id()
    nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
    return sorted(nodes, key=lambda n: (n["NodeID"] != head_id, n["NodeManagerAddress"]))


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


def main(argv: list[str]) -> int:
    """Run the spec in ``argv[0]`` on every node; the first failure's exit status."""
    spec = TorchrunSpec.from_json(json.loads(argv[0]))
    ray.init(address="auto", logging_level=logging.ERROR)
    nodes = _alive_nodes()
    actors: list[Actor] = [
        TorchrunActor.options(
            max_concurrency=4,
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
        ).remote()
        for n in nodes
    ]
    check_script = not spec.module
    facts: list[NodeFacts] = ray.get(
        [
            a.facts.remote(spec.script, check_script, spec.rdzv_port if i == 0 else None)
            for i, a in enumerate(actors)
        ],
        timeout=FACTS_TIMEOUT_S,
    )
    gpus = [int(n.get("Resources", {}).get("GPU", 0)) for n in nodes]
    refused = problems(spec, facts, gpus)
    if refused:
        for line in refused:
            say(f"cannot start: {line}")
        return EXIT_CANNOT_START
    return _run(spec, actors, facts, gpus)


def _run(spec: TorchrunSpec, actors: list[Actor], facts: list[NodeFacts], gpus: list[int]) -> int:
    head_ip = facts[0].ip
    rtk_env = {"RTK_RUN_DIR": os.environ.get("RTK_RUN_DIR", "")}
    nprocs = [nproc_for(spec, count) for count in gpus]
    # Every node starts at once: one round trip to all of them, not one after another.
    ray.get(
        [
            actor.start.remote(
                node_argv(spec, len(actors), head_ip, nproc, is_host=index == 0),
                rtk_env,
                dict(spec.env),
            )
            for index, (actor, nproc) in enumerate(zip(actors, nprocs, strict=True))
        ]
    )
    waits: dict[Any, int] = {actor.wait.remote(): index for index, actor in enumerate(actors)}
    ranks = sum(nprocs)
    say(
        f"torchrun started on {len(actors)} node(s), {ranks} rank(s); rendezvous "
        f"{head_ip}:{spec.rdzv_port}"
    )
    watchdog = _watch(spec, actors)
    power = power_driver(run_dir_from_env(), spec.power, say)
    # On a signal the limits go back first: the job's stop gives the driver seconds only.
    stopping = _stop_on_signal(actors, before=power.stop if power is not None else None)
    try:
        codes, first_failure = _wait_all(actors, facts, waits, stopping)
    finally:
        if power is not None:
            power.stop()
        if watchdog is not None:
            watchdog.stop()
    # Ray forwards a worker's output from its log file a moment after it is written:
    # the last lines (a failed rank's traceback, torchrun's error summary) come first.
    time.sleep(LOG_SETTLE_S)
    say(_outcome([f.node for f in facts], codes))
    if watchdog is not None and watchdog.aborted.is_set():
        return STALL_EXIT
    failed = (
        first_failure
        if first_failure is not None
        else next((i for i in sorted(codes) if codes[i] != 0), None)
    )
    if failed is None:
        return 0
    return codes[failed] if codes[failed] > 0 else 1  # killed by a signal: 1


def _watch(spec: TorchrunSpec, actors: list[Actor]) -> Watchdog | None:
    """The run's stall watchdog, started (None without a run directory to read)."""
    run_dir = run_dir_from_env()
    if not run_dir:
        return None
    return Watchdog(run_dir, spec.stall, say, abort=lambda _: _stop(actors)).start()


def _wait_all(
    actors: list[Actor],
    facts: list[NodeFacts],
    waits: dict[Any, int],
    stopping: threading.Event,
) -> tuple[dict[int, int], int | None]:
    """Every node's exit status, and the first node that failed (it stops the others)."""
    codes: dict[int, int] = {}
    first_failure: int | None = None
    while waits:
        ready, _ = ray.wait(list(waits), num_returns=1)
        for ref in ready:
            index = waits.pop(ref)
            codes[index] = ray.get(ref)
            if codes[index] != 0 and first_failure is None and not stopping.is_set():
                first_failure = index
                say(
                    f"torchrun on {facts[index].node} exited {codes[index]}; stopping "
                    "the other nodes"
                )
                _stop(actors[i] for i in waits.values())
    return codes, first_failure


def _outcome(names: list[str], codes: dict[int, int]) -> str:
    groups = group_nodes([(names[i], f"exited {codes[i]}") for i in sorted(codes)])
    return "; ".join(f"{g.count} node(s) {g.text} ({g.hostlist()})" for g in groups)


def _stop(actors: Iterable[Actor]) -> None:
    refs = [a.stop.remote() for a in actors]
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=STOP_WAIT_S)


def _stop_on_signal(
    actors: list[Actor], before: Callable[[], None] | None = None
) -> threading.Event:
    """SIGTERM or SIGINT: ``before``, stop every node's torchrun, then exit 128 + the signal."""
    flag = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        flag.set()
        if before is not None:
            before()
        say(f"stopping torchrun on {len(actors)} node(s) ({signal.Signals(signum).name})")
        _stop(actors)
        sys.exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handler)
    return flag


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
