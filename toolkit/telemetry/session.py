"""Telemetry for a run on a Ray cluster: samplers, clock offsets, collected traces.

The session runs in the driver (the Ray job on the head). It starts one ``NodeSampler``
actor pinned to each alive node; each writes a live trace on its own node (no shared
filesystem assumed), in the cluster's temp directory under a name that carries the
node's, so nodes that share a ``/tmp`` never write the same file. At the end the
driver measures clock offsets again, stops the samplers and collects every node's
trace with tasks pinned to that node, so a node whose sampler died still gives up what
it wrote before dying. Collection is streamed: the node compacts its trace, the driver
copies it in chunks into the run directory (resuming a partial copy), a bounded
number of nodes at a time.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from toolkit import wallclock
from toolkit.errors import RtkError
from toolkit.rundir import Manifest, NodeManifest, RunDir
from toolkit.rundir.trace_files import next_segment
from toolkit.rundir.traces import ReadStats, compact, live_files, read_table
from toolkit.telemetry.clock import ClockOffset, combine, estimate_offset
from toolkit.telemetry.options import TelemetryOptions
from toolkit.telemetry.sampler import DEFAULT_RATE_HZ, Sampler
from toolkit.telemetry.sensors.base import DEFAULT_ENERGY_RATE_HZ
from toolkit.telemetry.sensors.factory import make_sensors

logger = logging.getLogger(__name__)

HOST_RESOURCE_PREFIX = "rtk_host:"
CALL_TIMEOUT_S = 60.0
# Nodes collected at once, and the size of each piece of a trace copied to the driver.
COLLECT_PARALLEL = 8
# Nodes whose sampler is started or stopped at once: each takes a clock offset of
# ``clock_rounds`` round trips, about 50-100 ms, which one node after another makes a
# minute and more at 1,000 nodes before the first step and again after the last.
START_PARALLEL = 64
CHUNK_BYTES = 8 * 1024 * 1024


def exit_on_sigterm() -> None:
    """Make SIGTERM raise ``SystemExit(143)`` in the main thread.

    Ray stops a job (``rtk train`` interrupted, scancel, a time limit) with SIGTERM to
    its entrypoint; by default that ends Python at once, and the ``finally`` that stops
    the samplers and collects their traces never runs. As an exception it does, within
    the job's stop wait (``RAY_JOB_STOP_WAIT_TIME_S``, which rtk sets per job).
    """

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def node_local_dir(key: str) -> Path:
    """The directory on a node where its sampler writes during the run.

    Under the cluster's temp directory (``RTK_CLUSTER_DIR``, which rtk sets for every
    Ray process it starts), else Ray's, else the system's.
    """
    base = os.environ.get("RTK_CLUSTER_DIR")
    if not base:
        try:
            base = ray.get_runtime_context().get_temp_dir()
        except Exception:  # noqa: BLE001 - outside a Ray worker
            base = tempfile.gettempdir()
    return Path(base) / f"rtk-telemetry-{key}"


def live_trace_path(key: str, node: str) -> Path:
    """A node's live trace: its name carries the node's, so a shared /tmp is safe."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", node) or "node"
    return node_local_dir(key) / f"{safe}.arrows"


@ray.remote(num_cpus=0, max_restarts=0)
class NodeSampler:
    """One node's sampler, as a Ray actor pinned to that node."""

    def __init__(
        self,
        key: str,
        node: str,
        sensors: str,
        rate_hz: float,
        power_rate_hz: float | None,
        prometheus_port: int = 0,
        energy_rate_hz: float | None = DEFAULT_ENERGY_RATE_HZ,
    ) -> None:
        """Open the node's sensors; nothing is sampled before ``start``."""
        self.path = live_trace_path(key, node)
        self.sensors = make_sensors(sensors)
        self.sampler = Sampler(
            self.sensors, self.path, rate_hz, power_rate_hz, energy_rate_hz=energy_rate_hz
        )
        self.prometheus_port = prometheus_port
        self.server: Any = None

    def info(self) -> dict[str, Any]:
        """Who and what this sampler is: host, pid, sensors and their devices."""
        devices: dict[str, Any] = {}
        for sensor in self.sensors:
            devices.update(sensor.devices())
        return {
            "hostname": socket.gethostname(),
            "node": os.environ.get("RTK_NODE"),
            "pid": os.getpid(),
            "sensors": [s.name for s in self.sensors],
            "devices": devices,
            "path": str(self.path),
        }

    def wall_s(self) -> float:
        """This node's wall clock (for offset estimates), as its samples are stamped."""
        return wallclock.wall_s()

    def start(self) -> None:
        """Start sampling (and serving /metrics when a Prometheus port was given).

        The endpoint comes first, so one that cannot be served leaves nothing running.

        Raises:
            TelemetryError: The endpoint cannot be served (see ``prometheus.endpoint``).
        """
        if self.prometheus_port:
            from toolkit.telemetry.prometheus import NODE_IP_VARIABLE, endpoint, serve

            # rtk's env file names the node's cluster address; on a cluster rtk did
            # not start, Ray's own address of this node stands in for it.
            host = None
            if not os.environ.get(NODE_IP_VARIABLE):
                host = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
            node = os.environ.get("RTK_NODE") or socket.gethostname()
            self.server = serve(self.sampler, endpoint(self.prometheus_port, host), node)
        self.sampler.start()

    def window(self, seconds: float) -> dict[str, Any]:
        """This node's power and hottest temperature over the last ``seconds``."""
        return self.sampler.window(seconds)

    def stop(self) -> dict[str, Any]:
        """Stop sampling and close the sensors; return the sampler's statistics."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        stats = self.sampler.stop()
        for sensor in self.sensors:
            sensor.close()
        return stats.to_json()


@ray.remote(num_cpus=0)
def _compact_node_trace(live: str) -> dict[str, Any] | None:
    """Compact this node's live trace beside it; its path, size and first/last times.

    None when the node has no trace. A compacted file already there (an interrupted
    collection) is kept as it is, so a retry resumes the same bytes.
    """
    sources = live_files(Path(live))
    if not sources:
        return None
    target = Path(live).with_suffix(".compact.arrows")
    stats = ReadStats()
    if not target.exists():
        compact(sources, target, stats)
    times = read_table([target], columns=["wall_s"]).column("wall_s")
    first = times[0].as_py() if len(times) else None
    last = times[-1].as_py() if len(times) else None
    return {
        "path": str(target),
        "size_bytes": target.stat().st_size,
        "samples": len(times),
        "first_wall_s": first,
        "last_wall_s": last,
        "truncated": stats.truncated,
    }


@ray.remote(num_cpus=0)
def _read_chunk(path: str, offset: int, size: int) -> bytes:
    """``size`` bytes of a file on the node this task runs on, from ``offset``."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


@ray.remote(num_cpus=0)
def _remove_node_files(live: str, compacted: str) -> None:
    """Remove this node's traces; the directory too once no other node's are in it."""
    for path in [*live_files(Path(live)), Path(compacted)]:
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # another node sharing this /tmp still writes here
        Path(live).parent.rmdir()


@dataclass
class _Node:
    name: str
    node_id: str
    by_host: bool = False  # the name is an rtk_host resource
    actor: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    start_clock: ClockOffset | None = None
    end_clock: ClockOffset | None = None
    stats: dict[str, Any] | None = None
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

    def window(self, seconds: float) -> dict[str, dict[str, Any]]:
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
        with ThreadPoolExecutor(COLLECT_PARALLEL, thread_name_prefix="rtk-collect") as pool:
            list(pool.map(self._collect, self.nodes))
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

    def _collect(self, node: _Node) -> None:
        path = node.info.get("path")
        if not path:
            return
        # By host resource where there is one: a node whose Ray was restarted during
        # the run has a new node id but still holds the file in its filesystem.
        where: dict[str, Any] = (
            {"resources": {f"{HOST_RESOURCE_PREFIX}{node.name}": 0.001}}
            if node.by_host
            else {"scheduling_strategy": NodeAffinitySchedulingStrategy(node.node_id, soft=False)}
        )
        try:
            found = ray.get(_compact_node_trace.options(**where).remote(path), timeout=300.0)
        except Exception as e:  # noqa: BLE001 - the node itself is gone
            node.status, node.error = "missing", f"could not collect samples: {e}"
            return
        if found is None:
            node.status, node.error = "missing", f"no trace on the node ({path})"
            return
        try:
            self._copy(found, node.name, where)
        except Exception as e:  # noqa: BLE001 - what was copied stays in the .part file
            node.status, node.error = "missing", f"could not copy its trace: {e}"
            return
        _remove_node_files.options(**where).remote(path, found["path"])
        node.stats = node.stats or {}
        for key in ("samples", "first_wall_s", "last_wall_s"):
            node.stats[key] = found[key]
        if found["truncated"]:
            node.stats["truncated"] = found["truncated"]

    def _copy(self, found: dict[str, Any], name: str, where: dict[str, Any]) -> None:
        """Copy a compacted trace from its node in chunks, resuming a partial copy.

        The copy becomes the node's next ``trace-NNN.arrows`` once complete (a resumed
        run adds a segment: the trace covers every invocation).
        """
        node_dir = RunDir(self.run_dir).node_dir(name)
        node_dir.mkdir(parents=True, exist_ok=True)
        partial = node_dir / "trace.arrows.part"
        size = int(found["size_bytes"])
        offset = partial.stat().st_size if partial.exists() else 0
        if offset > size:
            offset = 0  # a different trace's leftovers
        with partial.open("r+b" if offset else "wb") as out:
            out.seek(offset)
            out.truncate()
            while offset < size:
                data: bytes = ray.get(
                    _read_chunk.options(**where).remote(found["path"], offset, CHUNK_BYTES),
                    timeout=CALL_TIMEOUT_S,
                )
                if not data:
                    raise OSError(f"the trace ended at {offset} of {size} bytes")
                out.write(data)
                offset += len(data)
        os.replace(partial, next_segment(node_dir))

    def _sensor_names(self) -> set[str]:
        return {s for n in self.nodes for s in n.info.get("sensors", [])}

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


def _node_manifest(node: _Node) -> NodeManifest:
    """A node's manifest entry as the session knows it now."""
    clock = combine(node.start_clock, node.end_clock)
    stats = node.stats or {}
    return NodeManifest(
        name=node.name,
        hostname=str(node.info.get("hostname") or node.name),
        offset_s=float(clock["offset_s"]),
        uncertainty_s=float(clock["uncertainty_s"] or 0.0),
        status=node.status,
        devices=node.info.get("devices", {}),
        samples_expected=stats.get("samples", 0),
        error=node.error,
        node_id=node.node_id,
        pid=node.info.get("pid"),
        sensors=tuple(node.info.get("sensors", [])),
        clock=clock,
        first_wall_s=stats.get("first_wall_s"),
        last_wall_s=stats.get("last_wall_s"),
        sampler=node.stats,
    )


def _node_name(node: dict[str, Any]) -> tuple[str, bool]:
    """The inventory name of a Ray node (its rtk_host resource), else its host name.

    The flag says whether the name came from the rtk_host resource.
    """
    for key in node.get("Resources", {}):
        if key.startswith(HOST_RESOURCE_PREFIX):
            return str(key[len(HOST_RESOURCE_PREFIX) :]), True
    return str(node.get("NodeManagerHostname") or node["NodeID"][:12]), False
