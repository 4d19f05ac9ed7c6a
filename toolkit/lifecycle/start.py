"""Start Ray across a cluster's nodes: probe each, write its files, the head, then workers.

``rtk up``'s executor (one node's steps are ``node_start``): it runs the commands of
the plan (``toolkit.cluster.plan``) and nothing else. Nodes where this cluster's Ray
already runs are left as they are, so ``rtk up`` twice starts nothing new. On failure
below ``min_nodes``, whatever this call started is stopped.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from toolkit.cluster.containers.docker import check_startable
from toolkit.cluster.plan import ClusterPlan, NodePlan
from toolkit.cluster.progress_reporter import Reporter
from toolkit.cluster.ray_status import ClusterStatus, cluster_status
from toolkit.cluster.up_steps import UpStep
from toolkit.credentials.rotate import rotate_credentials
from toolkit.errors import ClusterError, WaitTimeoutError
from toolkit.jobs import shipped_code
from toolkit.json_types import JsonObject
from toolkit.lifecycle.ctrl_c import HeldCtrlC
from toolkit.lifecycle.down import stop_nodes
from toolkit.lifecycle.failures.missing import explain_unjoined, missing_text
from toolkit.lifecycle.node_start import (
    POLL_INTERVAL_S,
    RAY_READY_TEXT,
    NodeOutcome,
    StaleEntries,
    prepare_node,
    record_failures,
    settled_call,
    start_node,
)
from toolkit.lifecycle.up_timings import SpanClock, UpTimings
from toolkit.state.cluster_state import ClusterState
from toolkit.state.store import StateStore
from toolkit.transport.base import Transport
from toolkit.transport.group import Waves

__all__ = ["RAY_READY_TEXT", "NodeOutcome", "UpResult", "up"]


@dataclass
class UpResult:
    """The outcome of a bring-up."""

    cluster: str
    dashboard_url: str
    nodes: list[NodeOutcome]
    status: ClusterStatus | None = None
    duration_s: float = 0.0
    started: list[str] = field(default_factory=list)
    timings: UpTimings | None = None
    ran: list[UpStep] = field(default_factory=list)  # the plan's steps taken, in order

    def to_json(self) -> JsonObject:
        """A JSON-ready dict (``rtk up --json``)."""
        return {
            "cluster": self.cluster,
            "dashboard_url": self.dashboard_url,
            "duration_s": round(self.duration_s, 3),
            "started": [name for name in self.started],
            "nodes": [vars(n) for n in self.nodes],
            "status": self.status.to_json() if self.status else None,
            "timings": self.timings.to_json() if self.timings else None,
            "ran": [str(step) for step in self.ran],
        }


def up(
    plan: ClusterPlan,
    transport: Transport,
    store: StateStore,
    reporter: Reporter,
    rotate: bool = False,
    alongside_wait: Callable[[frozenset[str]], None] | None = None,
    head_ready: Callable[[], None] | None = None,
) -> UpResult:
    """Bring the cluster up and wait for its nodes.

    ``head_ready``, when given, is called (in the head's thread, so it must be quick
    and must not raise) once the head has its files, before its ``ray start``: the
    head's env file is there for a process of its own to source (``rtk train --up``
    starts its driver then, held at ``toolkit.driver_gate``). Not called when the
    head failed.

    ``alongside_wait``, when given, runs in a thread of its own from the moment every
    ``ray start`` has returned, while the wait polls Ray; it gets the names of the
    nodes not failed (those expected alive) and ``up`` returns once both are done. It
    is for work that needs the nodes started, not Ray's word that they joined (the
    caller checks the status against what it assumed). On a failure it is not waited
    for.

    With ``rotate``, the token, CA and certificates are made anew first
    (``credentials.rotate``); a node where this cluster's Ray still runs then fails, since
    it holds the old ones.

    Every node is probed and gets its files, ``fanout.parallel`` at a time; the head
    starts as soon as it is ready, and each worker once both it and the head are, in
    waves of ``ray.start_wave`` every ``ray.start_wave_interval_s``. A thread is held
    only by an operation in flight: a node waiting for its turn holds none.

    Raises:
        ClusterError: The head failed, fewer than ``min_nodes`` nodes came up, a
            node's container runs only under SLURM (nothing is touched then), or
            ``rotate`` was asked while the cluster runs.
        WaitTimeoutError: Nodes did not join within ``ray.wait_timeout_s``.
    """
    began = time.monotonic()
    inv = plan.inventory
    check_startable(inv, [n.node for n in plan.nodes])
    outcomes = {n.node.name: NodeOutcome(n.node.name, n.role) for n in plan.nodes}
    result = UpResult(inv.name, plan.dashboard_url, list(outcomes.values()))
    if rotate:
        rotate_credentials(plan, transport, store, reporter)
        result.ran.append(UpStep.ROTATE)
    token = store.token() if plan.auth else None
    tls = store.tls if plan.tls else None
    if tls is not None:
        # Made (or checked) once here: the nodes' threads then only sign with it.
        tls.ca()
        tls.client()
    clocks = _Clocks(began)

    def prepare(node_plan: NodePlan) -> bool:
        at = time.monotonic()
        try:
            return prepare_node(
                node_plan,
                plan,
                transport,
                token,
                reporter,
                outcomes[node_plan.name],
                tls,
                refuse_running=rotate,
                head_ray_version=_head_version(plan, outcomes, node_plan),
            )
        finally:
            clocks.probe.add(at)

    head = plan.head
    try:
        waves = _start_all(plan, transport, reporter, outcomes, prepare, clocks, head_ready)
        result.ran.append(UpStep.NODES)
        result.started = _started(outcomes)
        beside = _beside(alongside_wait, outcomes)
        result.status = _wait(plan, transport, reporter, outcomes, clocks.wait)
        result.ran.append(UpStep.WAIT)
        if beside is not None:
            beside.result()
            result.ran.append(UpStep.PREFLIGHT)  # what every caller runs beside the wait
    except (ClusterError, KeyboardInterrupt):
        # Not enough nodes, or Ctrl-C: what this call started is stopped again.
        _undo(plan, transport, reporter, _started(outcomes))
        raise
    result.duration_s = time.monotonic() - began
    result.timings = UpTimings(
        clocks.probe.span(),
        clocks.head.span(),
        clocks.workers.span(),
        clocks.wait.span(),
        result.duration_s,
        waves,
    )
    store.save(
        dataclasses.replace(
            store.load() or ClusterState(),
            cluster=inv.name,
            source=inv.source,
            head=head.node.name,
            dashboard_url=plan.dashboard_url,
            temp_dir=plan.paths.temp_dir,
            nodes=tuple(n.node.name for n in plan.nodes),
            # Read back by the commands after (status, train, preflight) until rtk down.
            excluded=tuple(plan.excluded),
            up_at_wall_s=time.time(),
            nodes_rtk_digest=shipped_code.shared_digest(
                o.rtk_digest for o in outcomes.values() if o.action != "failed"
            ),
        )
    )
    result.ran.append(UpStep.STATE)
    return result


def _beside(
    work: Callable[[frozenset[str]], None] | None, outcomes: Mapping[str, NodeOutcome]
) -> Future[None] | None:
    """``work`` started in a daemon thread with the nodes not failed (None: no work).

    A daemon thread, not a pool's: a Ctrl-C or a failed wait leaves it behind rather
    than waiting for it.
    """
    if work is None:
        return None
    expected = frozenset(o.name for o in outcomes.values() if o.action != "failed")
    done: Future[None] = Future()

    def run() -> None:
        try:
            work(expected)
        except BaseException as e:  # noqa: BLE001 - handed to the caller through done
            done.set_exception(e)
        else:
            done.set_result(None)

    threading.Thread(target=run, name="rtk-up-beside-wait", daemon=True).start()
    return done


class _Clocks:
    """One ``SpanClock`` per phase of a bring-up."""

    def __init__(self, began: float) -> None:
        self.probe = SpanClock(began)
        self.head = SpanClock(began)
        self.workers = SpanClock(began)
        self.wait = SpanClock(began)


def _head_version(
    plan: ClusterPlan, outcomes: Mapping[str, NodeOutcome], node_plan: NodePlan
) -> str | None:
    """The head's Ray version for a worker to match (None for the head itself)."""
    return None if node_plan is plan.head else outcomes[plan.head.name].ray_version


def _started(outcomes: Mapping[str, NodeOutcome]) -> list[str]:
    return [o.name for o in outcomes.values() if o.action == "started"]


def _start_all(
    plan: ClusterPlan,
    transport: Transport,
    reporter: Reporter,
    outcomes: dict[str, NodeOutcome],
    prepare: Callable[[NodePlan], bool],
    clocks: _Clocks,
    head_ready: Callable[[], None] | None = None,
) -> int:
    """Prepare every node, start the head, then the workers; the waves they took.

    ``head_ready`` is called once the head is prepared (not when it failed).

    Raises:
        ClusterError: The head failed.
    """
    head = plan.head
    parallel = plan.inventory.fanout.parallel
    ready: queue.SimpleQueue[NodePlan | None] = queue.SimpleQueue()

    head_prepared = threading.Event()

    def bring_head() -> None:
        try:
            needed = settled_call(prepare, head, outcomes[head.name], reporter)
        finally:
            head_prepared.set()
        if head_ready is not None and outcomes[head.name].action != "failed":
            head_ready()
        if needed:
            at = time.monotonic()
            start_node(head, plan, transport, reporter, outcomes[head.name])
            clocks.head.add(at)

    def prepare_worker(node_plan: NodePlan) -> None:
        ok = settled_call(prepare, node_plan, outcomes[node_plan.name], reporter)
        ready.put(node_plan if ok else None)

    pool = ThreadPoolExecutor(max_workers=max(1, min(parallel, len(plan.nodes))))
    # The head is prepared and started in one task, submitted first so it never queues
    # behind workers. The workers' preparations are submitted by a thread of their own
    # once the head is prepared: on few cores their SSH handshakes and probes slowed the
    # head's own (0.8 s to start it at 6 nodes on 2 cores, against 0.4 s alone). Making
    # 1,000 threads takes a while; this thread starts each worker when it is ready.
    feeder = _Feeder(pool, prepare_worker, plan.workers, after=head_prepared)
    with HeldCtrlC() as ctrl_c:  # Ctrl-C raised between waits, never inside the pool's locks
        try:
            head_done = pool.submit(bring_head)
            feeder.start()
            ctrl_c.wait_for([head_done])
            head_done.result()
            if outcomes[head.name].action == "failed":
                raise ClusterError(f"head {head.name} failed: {outcomes[head.name].error}")
            return _start_workers(
                plan, transport, reporter, outcomes, ready, clocks.workers, ctrl_c
            )
        finally:
            feeder.stop()
            pool.shutdown(wait=True, cancel_futures=True)


class _Feeder(threading.Thread):
    """Submits one task per node to a pool once ``after`` is set, until done or stopped."""

    def __init__(
        self,
        pool: ThreadPoolExecutor,
        task: Callable[[NodePlan], None],
        nodes: Sequence[NodePlan],
        after: threading.Event,
    ) -> None:
        super().__init__(name="rtk-up-feeder", daemon=True)
        self._pool, self._task, self._nodes, self._after = pool, task, nodes, after
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._after.wait(0.1):
            if self._stopped.is_set():
                return
        for node_plan in self._nodes:
            if self._stopped.is_set():
                return
            self._pool.submit(self._task, node_plan)

    def stop(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join()


def _start_workers(
    plan: ClusterPlan,
    transport: Transport,
    reporter: Reporter,
    outcomes: dict[str, NodeOutcome],
    ready: queue.SimpleQueue[NodePlan | None],
    clock: SpanClock,
    ctrl_c: HeldCtrlC,
) -> int:
    """Start each worker as it comes ``ready`` (None: it need not), in waves; how many.

    This thread waits for workers to be ready and for each wave's turn; a thread of
    the start pool is taken only by a ``ray start`` in flight.
    """
    ray = plan.inventory.ray
    # Restarts next to a head that ran already wait for their old raylets' entries.
    stale = (
        StaleEntries(plan, transport, reporter)
        if outcomes[plan.head.name].action == "already running"
        else None
    )
    waves = Waves(ray.start_wave, ray.start_wave_interval_s)

    def start_worker(node_plan: NodePlan) -> None:
        at = time.monotonic()
        try:
            if stale is not None:
                stale.wait(node_plan.name)
            start_node(
                node_plan,
                plan,
                transport,
                reporter,
                outcomes[node_plan.name],
                _head_version(plan, outcomes, node_plan),
            )
        finally:
            clock.add(at)

    failed: dict[str, BaseException] = {}
    starts: dict[str, Future[None]] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, len(plan.workers)))
    try:
        for _ in plan.workers:
            node_plan = _next_ready(ready, ctrl_c)
            if node_plan is not None:
                waves.wait()
                ctrl_c.check()
                starts[node_plan.name] = pool.submit(start_worker, node_plan)
        ctrl_c.wait_for(list(starts.values()))
        for name, start in starts.items():
            try:
                start.result()
            except Exception as e:  # noqa: BLE001 - recorded per node below
                failed[name] = e
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    record_failures(failed, outcomes, reporter)
    return waves.waves


def _next_ready(ready: queue.SimpleQueue[NodePlan | None], ctrl_c: HeldCtrlC) -> NodePlan | None:
    """The next worker prepared; waits in short steps, so Ctrl-C is seen at once."""
    while True:
        ctrl_c.check()
        try:
            return ready.get(timeout=0.5)
        except queue.Empty:
            continue


def _wait(
    plan: ClusterPlan,
    transport: Transport,
    reporter: Reporter,
    outcomes: dict[str, NodeOutcome],
    clock: SpanClock,
) -> ClusterStatus:
    inv = plan.inventory
    hopeful = {name for name, o in outcomes.items() if o.action != "failed"}
    if len(hopeful) < inv.min_nodes:
        raise ClusterError(missing_text(plan, outcomes, None, inv.min_nodes))
    deadline = time.monotonic() + inv.ray.wait_timeout_s
    reporter.info(f"waiting for {len(hopeful)} node(s) to join")
    last_error: str | None = None
    joined: set[str] = set()
    while True:
        at = time.monotonic()
        status = cluster_status(plan, transport)
        clock.add(at)
        ready = set(status.ready)
        for name in sorted(ready - joined):
            reporter.phase(name, "joined")
        joined |= ready
        if status.error and status.error != last_error:
            reporter.info(f"not ready yet: {status.error}")
        last_error = status.error

        if hopeful <= ready:
            reporter.info(f"{len(ready)} of {len(plan.nodes)} node(s) alive")
            return status
        if time.monotonic() > deadline:
            if len(ready) >= inv.min_nodes:
                reporter.info(f"{len(ready)} node(s) alive; min_nodes {inv.min_nodes} allows it")
                return status
            explain_unjoined(plan, transport, outcomes, status, reporter)
            raise WaitTimeoutError(missing_text(plan, outcomes, status, inv.min_nodes))
        time.sleep(POLL_INTERVAL_S)


def _undo(plan: ClusterPlan, transport: Transport, reporter: Reporter, started: list[str]) -> None:
    if not started:
        return
    reporter.info(f"stopping what this run started on {len(started)} node(s)")
    stop_nodes(
        [n for n in plan.nodes if n.node.name in started],
        transport,
        reporter,
        plan.inventory.fanout.parallel,
    )
