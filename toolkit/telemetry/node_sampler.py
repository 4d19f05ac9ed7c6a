"""What runs on each node for the telemetry session: the sampler actor and its tasks.

``NodeSampler`` is one node's sampler as a Ray actor pinned to that node; it writes
the node's live trace in the cluster's temp directory (``live_trace_path``). At the
end the driver (``session.py``) hands the trace over with tasks pinned to the node:
``compact_node_trace`` compacts it beside the live one, ``read_chunk`` sends it a
piece at a time, ``remove_node_files`` cleans up after the copy.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from toolkit import wallclock
from toolkit.rundir.devices import DeviceInfo
from toolkit.rundir.traces import ReadStats, compact, live_files, read_table
from toolkit.telemetry.rank_files import rank_files_longer
from toolkit.telemetry.sampler import PowerWindow, Sampler, SamplerStats
from toolkit.telemetry.sensors.base import DEFAULT_ENERGY_RATE_HZ
from toolkit.telemetry.sensors.factory import make_sensors


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


@dataclass(frozen=True)
class SamplerInfo:
    """Who and what a node's sampler is (``NodeSampler.info``).

    Attributes:
        hostname: The node's host name.
        node: The inventory name rtk gave the node (``RTK_NODE``), when it did.
        pid: The sampler's process id.
        sensors: The sensors it opened.
        devices: Device key -> what its sensor says about it.
        path: Its live trace on the node.
    """

    hostname: str
    node: str | None
    pid: int
    sensors: tuple[str, ...]
    devices: Mapping[str, DeviceInfo]
    path: str


@dataclass(frozen=True)
class CompactedTrace:
    """A node's trace compacted beside the live one (``compact_node_trace``).

    Attributes:
        path: The compacted file on the node.
        size_bytes: Its size.
        samples: The samples in it.
        first_wall_s: The first sample's time (None without samples).
        last_wall_s: The last sample's time (None without samples).
        truncated: What reading the live files found cut or damaged.
    """

    path: str
    size_bytes: int
    samples: int
    first_wall_s: float | None
    last_wall_s: float | None
    truncated: tuple[str, ...]


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

    def info(self) -> SamplerInfo:
        """Who and what this sampler is: host, pid, sensors and their devices."""
        devices: dict[str, DeviceInfo] = {}
        for sensor in self.sensors:
            devices.update(sensor.devices())
        return SamplerInfo(
            hostname=socket.gethostname(),
            node=os.environ.get("RTK_NODE"),
            pid=os.getpid(),
            sensors=tuple(s.name for s in self.sensors),
            devices=devices,
            path=str(self.path),
        )

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

    def window(self, seconds: float) -> PowerWindow:
        """This node's power and hottest temperature over the last ``seconds``."""
        return self.sampler.window(seconds)

    def stop(self) -> SamplerStats:
        """Stop sampling and close the sensors; return the sampler's statistics."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        stats = self.sampler.stop()
        for sensor in self.sensors:
            sensor.close()
        return stats

    # Collecting the stopped sampler's trace: the actor is already on its node, with
    # pyarrow loaded; a task would start a Ray worker there first (seconds of a core).
    def compact(self, live: str) -> CompactedTrace | None:
        """``compact_trace`` here."""
        return compact_trace(live)

    def read_chunk(self, path: str, offset: int, size: int) -> bytes:
        """``read_file_chunk`` here."""
        return read_file_chunk(path, offset, size)

    def remove_files(self, live: str, compacted: str) -> None:
        """``remove_trace_files`` here."""
        remove_trace_files(live, compacted)

    def read_rank_files(self, run_dir: str, have: dict[str, int]) -> dict[str, bytes]:
        """``rank_files.rank_files_longer`` here (the driver's gathering of rank files)."""
        return rank_files_longer(run_dir, have)


def compact_trace(live: str) -> CompactedTrace | None:
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
    return CompactedTrace(
        path=str(target),
        size_bytes=target.stat().st_size,
        samples=len(times),
        first_wall_s=first,
        last_wall_s=last,
        truncated=tuple(stats.truncated),
    )


def read_file_chunk(path: str, offset: int, size: int) -> bytes:
    """``size`` bytes of a file on this node, from ``offset``."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


def remove_trace_files(live: str, compacted: str) -> None:
    """Remove this node's traces; the directory too once no other node's are in it."""
    for path in [*live_files(Path(live)), Path(compacted)]:
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # another node sharing this /tmp still writes here
        Path(live).parent.rmdir()


# The same as tasks, for a node whose sampler is gone (it died, or its node's Ray was
# restarted during the run): each starts a Ray worker on the node, where the sampler's
# own methods (NodeSampler.compact and the rest) answer at once.
@ray.remote(num_cpus=0)
def compact_node_trace(live: str) -> CompactedTrace | None:
    """``compact_trace`` on the node this task runs on."""
    return compact_trace(live)


@ray.remote(num_cpus=0)
def read_chunk(path: str, offset: int, size: int) -> bytes:
    """``read_file_chunk`` on the node this task runs on."""
    return read_file_chunk(path, offset, size)


@ray.remote(num_cpus=0)
def remove_node_files(live: str, compacted: str) -> None:
    """``remove_trace_files`` on the node this task runs on."""
    remove_trace_files(live, compacted)
