"""Telemetry for a run on a Ray cluster: samplers, clock offsets, collected traces.

The session runs in the driver (the Ray job on the head; the nodes' side is
``node_sampler.py``). It starts one ``NodeSampler`` actor pinned to each alive node;
each writes a live trace on its own node (no shared filesystem assumed), in the
cluster's temp directory under a name that carries the node's, so nodes that share a
``/tmp`` never write the same file. At the end the driver measures clock offsets again,
stops the samplers and collects every node's trace with tasks pinned to that node, so a
node whose sampler died still gives up what it wrote before dying. Collection is
streamed: the node compacts its trace, the driver copies it in chunks into the run
directory (resuming a partial copy), a bounded number of nodes at a time.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from toolkit.errors import RtkError
from toolkit.ray_resources import alive_host_nodes, host_name, host_resource
from toolkit.rundir import Manifest, NodeManifest, RunDir
from toolkit.rundir.telemetry import SamplerSummary
from toolkit.rundir.trace_files import next_segment
from toolkit.telemetry.clock import ClockOffset, combine, estimate_offset
from toolkit.telemetry.node_sampler import (
    CompactedTrace,
    NodeSampler,
    SamplerInfo,
    compact_node_trace,
    read_chunk,
    remove_node_files,
)
from toolkit.telemetry.options import TelemetryOptions
from toolkit.telemetry.sampler import DEFAULT_RATE_HZ, PowerWindow, SamplerStats
from toolkit.telemetry.sensors.base import DEFAULT_ENERGY_RATE_HZ

logger = logging.getLogger(__name__)

CALL_TIMEOUT_S = 60.0
# Nodes collected at once, and the size of each piece of a trace copied to the driver.
COLLECT_PARALLEL = 8
# Nodes whose sampler is started or stopped at once: each takes a clock offset of
# ``clock_rounds`` round trips, about 50-100 ms, which one node after another makes a
# minute and more at 1,000 nodes before the first step and again after the last.
START_PARALLEL = 64
CHUNK_BYTES = 8 * 1024 * 1024


@dataclass
class _Node:
    name: str
    node_id: str
    by_host: bool = False  # the name is an rtk_host resource
    actor: Any = None
    info: SamplerInfo | None = None
    start_clock: ClockOffset | None = None
    end_clock: ClockOffset | None = None
    stats: SamplerStats | None = None  # what its sampler said when it stopped
    collected: CompactedTrace | None = None  # its trace, as copied from the node
    status: str = "starting"
    error: str | None = None


class TelemetrySession:
    """Sample every alive node of the Ray cluster this driver is connected to."""

    def __init__(
        self,
        run_dir: str | Path,
        sensors: str = "auto",
        rate_hz: float = DEFAULT_RATE_HZ,
        power_rate_hz: float | None = None,
        clock_rounds: int = 15,
        prometheus_port: int = 0,
        energy_rate_hz: float | None = DEFAULT_ENERGY_RATE_HZ,
    ) -> None:
        """Prepare a session; ``start`` begins sampling.

        ``energy_rate_hz``: energy counter readings per second (None: with every full
        reading), as ``Sampler`` takes it.
        """
        self.prometheus_port = prometheus_port
        self.energy_rate_hz = energy_rate_hz
        self.run_dir = Path(run_dir)
        self.sensors = sensors
        self.rate_hz = rate_hz
        self.power_rate_hz = power_rate_hz
        self.clock_rounds = clock_rounds
        self.key = hashlib.sha256(f"{self.run_dir}:{time.time()}".encode()).hexdigest()[:12]
        self.nodes: list[_Node] = []
        self.started_wall_s: float | None = None
        self.ended_wall_s: float | None = None
        self.head = socket.gethostname()

    @classmethod
    def for_options(cls, run_dir: str | Path, options: TelemetryOptions) -> TelemetrySession:
        """A session that samples as ``options`` say (sensors, rates, Prometheus port)."""
        return cls(
            run_dir,
            options.sensors,
            options.rate_hz,
            options.power_rate_hz or None,
            prometheus_port=options.prometheus_port,
            energy_rate_hz=options.energy_rate_hz or None,
        )

    def __enter__(self) -> TelemetrySession:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start a sampler on every alive node and measure clock offsets."""
        head_id = ray.get_runtime_context().get_node_id()
        taken: set[str] = set()
        for node in ray.nodes():  # type: ignore[no-untyped-call]
            if not node.get("Alive"):
                continue
            name, by_host = _node_name(node)
            if name in taken:  # nodes sharing a host name (containers, one-host clusters)
                name = f"{name}-{node['NodeID'][:8]}"
            taken.add(name)
            self.nodes.append(_Node(name, node["NodeID"], by_host))
            if node["NodeID"] == head_id:
                self.head = name
        for node in self.nodes:
            node.actor = NodeSampler.options(  # type: ignore[attr-defined]
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
                name=f"rtk-sampler-{self.key}-{node.name}",
            ).remote(
                self.key,
                node.name,
                self.sensors,
                self.rate_hz,
                self.power_rate_hz,
                self.prometheus_port,
                self.energy_rate_hz,
            )
        infos = {n.name: n.actor.info.remote() for n in self.nodes}

        def start_one(node: _Node) -> None:
            try:
                node.info = ray.get(infos[node.name], timeout=CALL_TIMEOUT_S)
                node.start_clock = self._offset(node)
                ray.get(node.actor.start.remote(), timeout=CALL_TIMEOUT_S)
                node.status = "running"
            except Exception as e:  # noqa: BLE001 - one node's failure is recorded, not fatal
                cause = getattr(e, "cause", None)  # an actor's own error, in a RayTaskError
                why = cause if isinstance(cause, RtkError) else e
                node.status, node.error = "missing", f"sampler did not start: {why}"
                logger.warning("telemetry: %s: %s", node.name, node.error)

        self._each_node(start_one, "rtk-sampler-start")
        self.started_wall_s = time.time()
        self._write_manifest()
        running = sum(n.status == "running" for n in self.nodes)
        print(
            f"rtk telemetry: sampling {running}/{len(self.nodes)} node(s) at "
            f"{self.rate_hz:g} Hz ({', '.join(sorted(self._sensor_names()))})",
            flush=True,
        )

    def window(self, seconds: float) -> dict[str, PowerWindow]:
        """Per running node, its power and hottest temperature over the last ``seconds``."""
        running = [n for n in self.nodes if n.status == "running"]
        refs = {n.name: n.actor.window.remote(seconds) for n in running}
        found = {}
        for name, ref in refs.items():
            try:
                found[name] = ray.get(ref, timeout=CALL_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - a lost node is left out, not fatal
                logger.warning("telemetry: %s: no window: %s", name, e)
        return found

    def helpers(self) -> dict[str, Any]:
        """Ray node id -> the sampler running there, until ``stop``.

        An actor on its node: the driver's small end-of-run reads run in it
        (``rank_files.gather_rank_files``) instead of a task that starts a worker.
        """
        return {n.node_id: n.actor for n in self.nodes if n.status == "running" and n.actor}

    def stop(self) -> None:
        """Measure offsets again, stop every sampler, collect every node's samples."""
        self.ended_wall_s = time.time()

        def stop_one(node: _Node) -> None:
            if node.status != "running":
                return
            try:
                node.end_clock = self._offset(node)
                node.stats = ray.get(node.actor.stop.remote(), timeout=CALL_TIMEOUT_S)
                node.status = "complete"
            except Exception as e:  # noqa: BLE001 - a dead sampler still has its file
                node.status, node.error = "lost", f"sampler died during the run: {e}"
                logger.warning("telemetry: %s: %s", node.name, node.error)

        self._each_node(stop_one, "rtk-sampler-stop")
        alive = _alive_hosts()
        with ThreadPoolExecutor(COLLECT_PARALLEL, thread_name_prefix="rtk-collect") as pool:
            list(pool.map(lambda node: self._collect(node, alive), self.nodes))
        self._write_manifest()
        for node in self.nodes:
            if node.actor is not None:
                ray.kill(node.actor)

    def _each_node(self, task: Callable[[_Node], None], name: str) -> None:
        """``task`` for every node, ``START_PARALLEL`` at a time (it records, never raises)."""
        workers = max(1, min(START_PARALLEL, len(self.nodes)))
        with ThreadPoolExecutor(workers, thread_name_prefix=name) as pool:
            list(pool.map(task, self.nodes))

    def _offset(self, node: _Node) -> ClockOffset:
        actor = node.actor

        def remote_wall_s() -> float:
            value: float = ray.get(actor.wall_s.remote(), timeout=CALL_TIMEOUT_S)
            return value

        return estimate_offset(remote_wall_s, self.clock_rounds)

    def _collect(self, node: _Node, alive: set[str] | None = None) -> None:
        if node.info is None:
            return
        if node.by_host and alive is not None and node.name not in alive:
            # A task asking for a node Ray no longer has would wait its whole timeout.
            node.status, node.error = "missing", "its node left the cluster; samples stay there"
            return
        path = node.info.path
        # By host resource where there is one: a node whose Ray was restarted during
        # the run has a new node id but still holds the file in its filesystem.
        where: Mapping[str, object] = (
            {"resources": {host_resource(node.name): 0.001}}
            if node.by_host
            else {"scheduling_strategy": NodeAffinitySchedulingStrategy(node.node_id, soft=False)}
        )
        call = self._caller(node, where)
        try:
            found = ray.get(call("compact", path), timeout=300.0)
        except Exception as e:  # noqa: BLE001 - the node itself is gone
            node.status, node.error = "missing", f"could not collect samples: {e}"
            return
        if found is None:
            node.status, node.error = "missing", f"no trace on the node ({path})"
            return
        try:
            self._copy(found, node.name, call)
        except Exception as e:  # noqa: BLE001 - what was copied stays in the .part file
            node.status, node.error = "missing", f"could not copy its trace: {e}"
            return
        removed = call("remove_files", path, found.path)
        if _through_sampler(node):
            # Waited for: the sampler is killed next, and would take the call with it.
            with contextlib.suppress(Exception):
                ray.get(removed, timeout=CALL_TIMEOUT_S)
        node.collected = found

    def _caller(self, node: _Node, where: Mapping[str, object]) -> Callable[..., Any]:
        """How to run a collection step on ``node``: ``call(NAME, *args)`` -> a ref.

        Through its sampler when that stopped cleanly (it is on the node, warm); else a
        task placed by ``where`` (``compact_node_trace`` and the others).
        """
        if _through_sampler(node):
            actor = node.actor
            return lambda name, *args: getattr(actor, name).remote(*args)
        tasks: dict[str, Any] = {
            "compact": compact_node_trace,
            "read_chunk": read_chunk,
            "remove_files": remove_node_files,
        }
        return lambda name, *args: tasks[name].options(**where).remote(*args)

    def _copy(self, found: CompactedTrace, name: str, call: Callable[..., Any]) -> None:
        """Copy a compacted trace from its node in chunks, resuming a partial copy.

        The copy becomes the node's next ``trace-NNN.arrows`` once complete (a resumed
        run adds a segment: the trace covers every invocation).
        """
        node_dir = RunDir(self.run_dir).node_dir(name)
        node_dir.mkdir(parents=True, exist_ok=True)
        partial = node_dir / "trace.arrows.part"
        size = found.size_bytes
        offset = partial.stat().st_size if partial.exists() else 0
        if offset > size:
            offset = 0  # a different trace's leftovers
        with partial.open("r+b" if offset else "wb") as out:
            out.seek(offset)
            out.truncate()
            while offset < size:
                data: bytes = ray.get(
                    call("read_chunk", found.path, offset, CHUNK_BYTES), timeout=CALL_TIMEOUT_S
                )
                if not data:
                    raise OSError(f"the trace ended at {offset} of {size} bytes")
                out.write(data)
                offset += len(data)
        os.replace(partial, next_segment(node_dir))

    def _sensor_names(self) -> set[str]:
        return {s for n in self.nodes if n.info is not None for s in n.info.sensors}

    def manifest(self) -> Manifest:
        """The manifest as it stands (docs/telemetry.md)."""
        return Manifest(
            head=self.head,
            rate_hz=self.rate_hz,
            power_rate_hz=self.power_rate_hz or self.rate_hz,
            nodes={n.name: _node_manifest(n) for n in self.nodes},
            run_dir=str(self.run_dir),
            started_wall_s=self.started_wall_s,
            ended_wall_s=self.ended_wall_s,
        )

    def _write_manifest(self) -> None:
        self.manifest().write(RunDir(self.run_dir).manifest)


def _through_sampler(node: _Node) -> bool:
    """True when ``node``'s collection runs in its sampler (``TelemetrySession._caller``).

    The sampler stopped cleanly, so it is alive on the node; else a task does it.
    """
    return node.actor is not None and node.status == "complete"


def _node_manifest(node: _Node) -> NodeManifest:
    """A node's manifest entry as the session knows it now."""
    clock = combine(node.start_clock, node.end_clock)
    sampler = _sampler_summary(node)
    info = node.info
    return NodeManifest(
        name=node.name,
        hostname=(info.hostname if info is not None else "") or node.name,
        offset_s=clock.offset_s,
        uncertainty_s=clock.uncertainty_s or 0.0,
        status=node.status,
        devices=dict(info.devices) if info is not None else {},
        samples_expected=0 if sampler is None else sampler.samples,
        error=node.error,
        node_id=node.node_id,
        pid=info.pid if info is not None else None,
        sensors=info.sensors if info is not None else (),
        clock=clock,
        first_wall_s=None if sampler is None else sampler.first_wall_s,
        last_wall_s=None if sampler is None else sampler.last_wall_s,
        sampler=sampler,
    )


def _sampler_summary(node: _Node) -> SamplerSummary | None:
    """The manifest's ``sampler``: the stop statistics, the copied trace's counts over them."""
    stats = None if node.stats is None else node.stats.summary()
    found = node.collected
    if found is None:
        return stats
    collected = SamplerSummary(
        found.samples, found.first_wall_s, found.last_wall_s, truncated=found.truncated
    )
    return collected if stats is None else replace(collected, stop=stats.stop)


def _node_name(node: Mapping[str, object]) -> tuple[str, bool]:
    """The inventory name of a Ray node (its rtk_host resource), else its host name.

    ``node`` is one of ``ray.nodes()``. The flag says whether the name came from the
    rtk_host resource.
    """
    name = host_name(node.get("Resources"))
    if name is not None:
        return name, True
    return str(node.get("NodeManagerHostname") or str(node["NodeID"])[:12]), False


def _alive_hosts() -> set[str] | None:
    """The inventory names of the nodes Ray lists alive now (None: Ray did not say)."""
    try:
        nodes = ray.nodes()  # type: ignore[no-untyped-call]
    except Exception:  # noqa: BLE001 - without an answer every node is tried
        return None
    return set(alive_host_nodes(nodes))
