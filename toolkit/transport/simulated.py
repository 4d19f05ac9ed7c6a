"""A simulated cluster and the transport that reaches it: rtk at any node count, no nodes.

``SimulatedCluster`` is the nodes' side: which run this cluster's Ray, the files rtk
put there, and Ray's own view of the cluster (a node registers with the head when its
``ray start`` has finished, later for a late joiner). ``SimulatedTransport`` is one
command's way to it, as the SSH transport is: one connection per node, opened on first
use at the cost of a handshake and reused for every step after. Everything else is
rtk's own: the planner, the executor, the wait loop (its question to Ray is the node
agent's ``status``, answered here from the view in Ray's JSON), preflight and teardown.

Each operation takes its time from a ``LatencyModel`` in model seconds, slept for real
after scaling (``scale`` 0.01 runs a 5 s ``ray start`` in 50 ms). ``Faults`` picks
nodes that cannot be reached, whose ``ray start`` fails, or that join late, and Ray
ports that preflight's connections find closed on a node or cut between two.

    cluster = SimulatedCluster(LatencyModel(worker_start_s=5, scale=0.01))
    with SimulatedTransport(cluster) as transport:
        ...  # anything that takes a Transport
"""

from __future__ import annotations

import functools
import json
import random
import re
import shlex
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import toolkit
from toolkit.errors import TransportError
from toolkit.inventory import Node
from toolkit.node.common import source_digest
from toolkit.nodeinfo.reach_request import ReachRequest, request_in
from toolkit.nodeinfo.script import AGENT, FACTS
from toolkit.ray_resources import host_resource
from toolkit.shell import parse_env_file, ray_tls_on
from toolkit.transport.base import CommandResult, Transport
from toolkit.transport.pool import ConnectionPool

READY_TEXT = "Ray runtime started."
_AGENT_WORD = re.compile(r"^(probe|stop|status|smoke|pack)$")
# rtk's container commands (``cluster.containers.docker``): start, removal, exec.
_CONTAINER_RUN = re.compile(r"^(docker|podman) run -d --name (\S+) ")
_CONTAINER_REMOVE = re.compile(r"^command -v (docker|podman) >/dev/null \|\| exit 0; ids=")


@dataclass(frozen=True)
class LatencyModel:
    """How long each operation takes, in model seconds, and how model time maps to real.

    Attributes:
        handshake_s: Opening a node's connection (TCP, SSH key exchange, login); once
            per node per transport, as the SSH transport reuses its connection.
        round_trip_s: One command's round trip on an open connection.
        probe_s: The node agent's probe, on top of the round trip.
        put_s: Writing one file (SFTP), on top of the round trip.
        head_start_s: ``ray start --head``.
        worker_start_s: A worker's ``ray start``.
        status_s: The agent's ``status`` (Ray's node list) on the head.
        facts_s: Preflight's facts script (its port checks included).
        stop_s: The agent's ``stop``.
        unreachable_s: Until a connection to an unreachable node fails.
        scale: Real seconds slept per model second.
    """

    handshake_s: float = 0.2
    round_trip_s: float = 0.005
    probe_s: float = 0.1
    put_s: float = 0.01
    head_start_s: float = 5.0
    worker_start_s: float = 5.0
    status_s: float = 0.05
    facts_s: float = 1.0
    stop_s: float = 0.5
    unreachable_s: float = 10.0
    scale: float = 1.0

    def sleep(self, model_s: float) -> None:
        """Let ``model_s`` model seconds pass."""
        if model_s > 0 and self.scale > 0:
            time.sleep(model_s * self.scale)


@dataclass(frozen=True)
class Faults:
    """What goes wrong, by node name.

    Attributes:
        unreachable: Nodes no connection reaches (every call fails after
            ``LatencyModel.unreachable_s``).
        start_fails: Nodes whose ``ray start`` exits 1.
        join_late_s: Nodes that register with the head this many model seconds after
            their ``ray start`` returned.
        ports_closed: Node -> the Ray ports (by name: ``gcs``, ``object_manager``)
            that refuse every connection there.
        pairs_cut: (source, target) pairs whose connections to any port time out.
        other_rtk: Nodes whose Python imports no rtk (the others import this one).
    """

    unreachable: frozenset[str] = frozenset()
    start_fails: frozenset[str] = frozenset()
    join_late_s: Mapping[str, float] = field(default_factory=dict)
    ports_closed: Mapping[str, frozenset[str]] = field(default_factory=dict)
    pairs_cut: frozenset[tuple[str, str]] = frozenset()
    other_rtk: frozenset[str] = frozenset()


def pick_nodes(names: Sequence[str], rate: float, seed: int = 0) -> frozenset[str]:
    """``rate`` of ``names`` (at least one when ``rate`` > 0), the same ones for a seed."""
    if rate <= 0 or not names:
        return frozenset()
    count = max(1, round(len(names) * rate))
    return frozenset(random.Random(seed).sample(list(names), min(count, len(names))))


@dataclass
class _RayNode:
    node_id: str
    node_ip: str
    is_head: bool
    resources: dict[str, float]
    registers_at: float  # time.monotonic() from which Ray lists it
    alive: bool = True


class SimulatedCluster:
    """The nodes' state and Ray's view of them; shared by every transport made on it."""

    def __init__(
        self,
        model: LatencyModel | None = None,
        faults: Faults | None = None,
        record_order: bool = False,
    ) -> None:
        """Nodes with no state yet; ``record_order`` keeps every operation in ``order``.

        ``order`` grows by one entry per operation: only the tests that read it ask for it.
        """
        self.model = model or LatencyModel()
        self.faults = faults or Faults()
        self.files: dict[tuple[str, str], bytes] = {}
        self.processes: set[str] = set()  # nodes where this cluster's Ray processes run
        self.containers: dict[str, str] = {}  # node -> the name of rtk's container there
        self.ray: dict[str, _RayNode] = {}  # Ray's view: node name -> its entry in the GCS
        self.head: str | None = None
        self.ray_starts = 0
        self.connections = 0
        self.operations: Counter[str] = Counter()  # probe, put, ray start, status, ...
        self.record_order = record_order
        self.order: list[str] = []  # with record_order: the operations, in the order they began
        self.sim_cpu_s = 0.0  # the simulation's own CPU time, to tell it from rtk's
        self.lock = threading.Lock()

    # What rtk's node scripts would find.

    def running(self) -> set[str]:
        """Nodes where this cluster's Ray runs."""
        with self.lock:
            return set(self.processes)

    def registered(self) -> list[str]:
        """Nodes Ray lists as alive now."""
        now = time.monotonic()
        with self.lock:
            return [n for n, e in self.ray.items() if e.alive and e.registers_at <= now]

    def status_answer(self) -> tuple[int, dict[str, Any]]:
        """The agent's ``status`` on the head: Ray's node list, or why it cannot be read."""
        with self.lock:
            head = self.ray.get(self.head or "")
            if head is None or not head.alive:
                return 1, {"error": "ConnectionError: Failed to connect to the dashboard"}
            now = time.monotonic()
            nodes = [
                {
                    "node_id": e.node_id,
                    "node_ip": e.node_ip,
                    "state": "ALIVE" if e.alive else "DEAD",
                    "is_head": e.is_head,
                    "resources": dict(e.resources),
                }
                for e in self.ray.values()
                if e.registers_at <= now
            ]
        return 0, {"ray_version": "2.60.0", "nodes": nodes}

    def start_ray(self, node: Node, head: bool, container: str | None = None) -> CommandResult:
        """``ray start`` on ``node`` (in ``container``): it runs, and registers when the model says.

        A failed start in a container leaves no container, as rtk's start command does.
        """
        model, name = self.model, node.name
        model.sleep(model.head_start_s if head else model.worker_start_s)
        with self.lock:
            head_alive = self.head is not None and self.ray[self.head].alive
        if name in self.faults.start_fails:
            return _result(node, "ray start", 1, "", "raylet exited unexpectedly (simulated)")
        if not head and not head_alive:
            return _result(node, "ray start", 1, "", "Failed to connect to GCS (simulated)")
        delay_s = self.faults.join_late_s.get(name, 0.0) * model.scale
        resources = {host_resource(name): 1.0, "CPU": float(node.cpus or 8), "memory": 2.0**35}
        if node.gpus:
            resources["GPU"] = float(node.gpus)
        resources.update(node.resources)
        with self.lock:
            self.ray_starts += 1
            self.processes.add(name)
            if container is not None:
                self.containers[name] = container
            self.ray[name] = _RayNode(
                f"{self.ray_starts:056x}",
                node.address,
                head,
                resources,
                time.monotonic() + delay_s,
            )
            if head:
                self.head = name
        return _result(node, "ray start", 0, f"{READY_TEXT}\n", "")

    def stop_ray(self, node: Node) -> dict[str, Any]:
        """The agent's ``stop``: this cluster's processes there end; Ray marks it dead."""
        self.model.sleep(self.model.stop_s)
        with self.lock:
            was_running = node.name in self.processes
            self.processes.discard(node.name)
            entry = self.ray.get(node.name)
            if entry is not None:
                entry.alive = False
            if node.name == self.head:
                self.ray.clear()  # the GCS is gone, and with it Ray's view
                self.head = None
        return {"stopped": 3 if was_running else 0, "killed": 0, "left": [], "removed": True}

    def remove_container(self, node: Node) -> CommandResult:
        """Rtk's removal of its container there: its processes end; the id it removed."""
        with self.lock:
            name = self.containers.pop(node.name, None)
        if name is not None:
            self.stop_ray(node)
        return _result(node, "remove container", 0, f"{name}\n" if name else "", "")

    def probe_answer(self, node: Node, args: Sequence[str]) -> dict[str, Any]:
        """The agent's ``probe``: the route to the head, and whether Ray runs here.

        With a container request (its fifth argument), a runtime that answers, has the
        image and the GPU hook, and rtk's container running where Ray runs.
        """
        self.model.sleep(self.model.probe_s)
        head_address = args[0] if args else ""
        running = node.name in self.running()
        request = json.loads(args[4]) if len(args) > 4 and args[4] else None
        answer = {
            "hostname": node.name,
            "python": "3.11.9",
            "route": {"head_ip": head_address, "source_ip": node.address, "interface": "eth0"},
            "network": {
                "interface": "eth0",
                "interface_source": "route",
                "link": {"name": "eth0", "mtu": 1500, "operstate": "up", "speed_mbps": 25000},
                "route_devices": ["eth0"],
                "infiniband": False,
                "hcas": [],
                "route_ports": [],
            },
            "rtk_pids": [4242, 4243, 4244] if running else [],
            "raylet_running": running,
            "busy_ports": [],
            "rtk_source": None if node.name in self.faults.other_rtk else _this_rtk(),
        }
        if request is not None:
            with self.lock:
                boxed = node.name in self.containers
            answer["container"] = {
                "runtime": request["runtime"],
                "path": f"/usr/bin/{request['runtime']}",
                "version": "simulated",
                "error": None,
                "image_present": True,
                "gpu_hook": {"found": True, "via": "simulated"} if request["gpus"] else None,
                "state": "running" if boxed and running else None,
            }
        return answer

    def facts_answer(
        self, node: Node, args: Sequence[str], request: ReachRequest
    ) -> dict[str, Any]:
        """Preflight's ``facts.py``: a healthy host, and the ports ``request`` names.

        A port is reached where Ray runs, unless ``Faults`` closes it on its node or
        cuts the pair.
        """
        self.model.sleep(self.model.facts_s)
        run_dir = args[0] if args else "~"
        up = self.running()
        faults = self.faults
        reach: dict[str, dict[str, Any]] = {}
        for peer in request.peers:
            closed = faults.ports_closed.get(peer.name, frozenset())
            cut = (node.name, peer.name) in faults.pairs_cut
            for port in peer.ports:
                key = f"{peer.name}:{port}"
                if cut:
                    reach[key] = {"ok": False, "error": "timed out after 2 s (filtered?)"}
                elif peer.name not in up or port in closed:
                    reach[key] = _refused()
                else:
                    reach[key] = {"ok": True, "ms": 0.2}
        answer: dict[str, Any] = {
            "hostname": node.name,
            "hostname_addresses": [node.address],
            "dev_shm_bytes": 64 * 2**30,
            "memlock_bytes": None,
            "nofile": 1048576,
            "disk_path": run_dir,
            "disk_free_bytes": 2**40,
            "ephemeral_ports": [32768, 60999],
            "versions": {"python": "3.11.9", "ray": "2.60.0", "torch": None},
            "python_executable": node.python,
            "wall_s": time.time(),
            "reach": reach,
            "gpus": {"available": False, "reason": "simulated node"},
        }
        if len(args) > 2 and args[2]:
            answer["ray_files"] = self._ray_files(node.name, args[2])
        return answer

    def _ray_files(self, node: str, env_file: str) -> dict[str, str]:
        """As ``facts.ray_files`` reads them: the env file, and its TLS files when on."""
        with self.lock:
            env = self.files.get((node, env_file))
            if env is None:
                return {}
            found = {"env": env.decode()}
            values = parse_env_file(found["env"])
            if ray_tls_on(values):
                for key, name in (("cert", "RAY_TLS_SERVER_CERT"), ("ca", "RAY_TLS_CA_CERT")):
                    data = self.files.get((node, values.get(name, "")))
                    if data is not None:
                        found[key] = data.decode()
            return found

    # Kept between processes (the benchmark runs each rtk command in its own).

    def save(self, path: Path) -> None:
        """Write the nodes' state (files, Ray's view) to ``path`` as JSON."""
        now = time.monotonic()
        with self.lock:
            data = {
                "head": self.head,
                "ray_starts": self.ray_starts,
                "processes": sorted(self.processes),
                "containers": self.containers,
                "files": [[n, p, d.decode("latin-1")] for (n, p), d in self.files.items()],
                "ray": {
                    name: {**vars(e), "registers_at": max(0.0, e.registers_at - now)}
                    for name, e in self.ray.items()
                },
            }
        path.write_text(json.dumps(data))

    def load(self, path: Path) -> None:
        """Read back what ``save`` wrote (late joiners keep the delay they had left)."""
        data = json.loads(path.read_text())
        now = time.monotonic()
        with self.lock:
            self.head = data["head"]
            self.ray_starts = data["ray_starts"]
            self.processes = set(data["processes"])
            self.containers = dict(data.get("containers", {}))
            self.files = {(n, p): d.encode("latin-1") for n, p, d in data["files"]}
            self.ray = {
                name: _RayNode(**{**e, "registers_at": now + e["registers_at"]})
                for name, e in data["ray"].items()
            }


class SimulatedTransport(Transport):
    """Reaches a ``SimulatedCluster``; one connection per node, like the SSH transport."""

    name = "simulated"

    def __init__(self, cluster: SimulatedCluster) -> None:
        self.cluster = cluster
        self._pool: ConnectionPool[str] = ConnectionPool(self._handshake)

    def run(
        self,
        node: Node,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout_s: float = 60.0,
    ) -> CommandResult:
        """Answer ``command`` as the node would (see ``Transport.run``)."""
        self._pool.get(node)
        began = time.monotonic()
        cpu = time.thread_time()
        model = self.cluster.model
        model.sleep(model.round_trip_s)
        try:
            result = self._answer(node, command, stdin)
        finally:
            self._count_cpu(cpu)
        return CommandResult(
            node.name,
            command,
            result.exit_code,
            result.stdout,
            result.stderr,
            time.monotonic() - began,
        )

    def put(self, node: Node, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Keep the file in the cluster's state."""
        self._pool.get(node)
        model = self.cluster.model
        model.sleep(model.round_trip_s + model.put_s)
        self._count("put")
        with self.cluster.lock:
            self.cluster.files[(node.name, path)] = data

    def get(self, node: Node, path: str, local: Path) -> int:
        """Copy a file kept in the cluster's state to ``local``."""
        self._pool.get(node)
        self.cluster.model.sleep(self.cluster.model.round_trip_s)
        self._count("get")
        with self.cluster.lock:
            data = self.cluster.files.get((node.name, path))
        if data is None:
            raise TransportError(f"{node.name}: cannot copy {path}: No such file")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(data)
        return len(data)

    def close(self) -> None:
        """Drop every connection: the next transport pays the handshakes again."""
        self._pool.drain()

    def _handshake(self, node: Node) -> str:
        """Open ``node``'s simulated connection: the modelled handshake, or its failure."""
        model = self.cluster.model
        if node.name in self.cluster.faults.unreachable:
            model.sleep(model.unreachable_s)
            raise TransportError(
                f"{node.name}: SSH to {node.address} timed out after "
                f"{model.unreachable_s:g} s (simulated)"
            )
        model.sleep(model.handshake_s)
        with self.cluster.lock:
            self.cluster.connections += 1
        return node.name

    def _count_cpu(self, began: float) -> None:
        spent = time.thread_time() - began
        with self.cluster.lock:
            self.cluster.sim_cpu_s += spent

    def _count(self, operation: str) -> None:
        with self.cluster.lock:
            self.cluster.operations[operation] += 1
            if self.cluster.record_order:
                self.cluster.order.append(operation)

    def _answer(self, node: Node, command: str, stdin: str | None) -> CommandResult:
        cluster = self.cluster
        if stdin is not None and stdin == AGENT.source():
            word, args = _script_args(command)
            self._count(word or "agent")
            if word == "probe":
                return _json(node, command, cluster.probe_answer(node, args))
            if word == "stop":
                return _json(node, command, cluster.stop_ray(node))
            if word == "status":
                cluster.model.sleep(cluster.model.status_s)
                code, data = cluster.status_answer()
                return _json(node, command, data, code)
            return _json(node, command, {"error": f"agent {word} is not simulated"}, 1)
        request = None if stdin is None else request_in(FACTS.source(), stdin)
        if request is not None:
            _, args = _script_args(command, word=False)
            self._count("facts")
            return _json(node, command, cluster.facts_answer(node, args, request))
        if is_ray_start(command):
            self._count("ray start")
            boxed = _CONTAINER_RUN.match(command)
            name = boxed.group(2) if boxed else None
            return cluster.start_ray(node, head=" --head " in f" {command} ", container=name)
        if _CONTAINER_REMOVE.match(command):
            self._count("remove container")
            return cluster.remove_container(node)
        self._count("command")
        return _result(node, command, 0, "", "")


@functools.cache
def _this_rtk() -> dict[str, str]:
    """The probe's answer for a node with the same rtk as this process."""
    root = str(Path(toolkit.__file__).parent)
    return {"path": root, "digest": source_digest(root)}


def is_ray_start(command: str) -> bool:
    """``ray start`` of a head (``--head``) or a worker (``--address=``)."""
    words = command.split()
    return "start" in words and any(w == "--head" or w.startswith("--address=") for w in words)


def _script_args(command: str, word: bool = True) -> tuple[str, list[str]]:
    """The node script's subcommand (when ``word``) and arguments after ``python -``."""
    # shlex reads a character at a time: text with nothing quoted is split on white space.
    words = shlex.split(command) if any(c in command for c in "'\"\\") else command.split()
    args = words[words.index("-") + 1 :] if "-" in words else []
    if word and args and _AGENT_WORD.match(args[0]):
        return args[0], args[1:]
    return "", args


def _refused() -> dict[str, Any]:
    return {"ok": False, "error": "Connection refused"}


def _json(node: Node, command: str, data: Mapping[str, Any], code: int = 0) -> CommandResult:
    return _result(node, command, code, json.dumps(dict(data)) + "\n", "")


def _result(node: Node, command: str, code: int, stdout: str, stderr: str) -> CommandResult:
    return CommandResult(node.name, command, code, stdout, stderr, 0.0)
