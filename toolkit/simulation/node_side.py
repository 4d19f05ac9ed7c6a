"""The simulated nodes' side: their Ray, the files rtk put there, and what each script answers.

``SimulatedCluster`` keeps which nodes run this cluster's Ray, the files rtk put on
them and Ray's own view of the cluster (a node registers with the head when its
``ray start`` has finished, later for a late joiner), and answers the node agent's
``probe``, ``status``, ``smoke`` and ``stop`` and preflight's facts as the nodes would.
Each answer is the JSON document the node script would print (``JsonObject``): rtk
reads it as it reads a real node's.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import toolkit
from toolkit.inventory import Node
from toolkit.json_types import JsonObject, JsonValue
from toolkit.node.common import source_digest
from toolkit.nodeinfo.reach_request import ReachRequest
from toolkit.ray_resources import host_resource
from toolkit.shell import parse_env_file, ray_tls_on
from toolkit.simulation.scenario import Faults, LatencyModel
from toolkit.transport.base import CommandResult

READY_TEXT = "Ray runtime started."


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

    def status_answer(self) -> tuple[int, JsonObject]:
        """The agent's ``status`` on the head: Ray's node list, or why it cannot be read."""
        with self.lock:
            head = self.ray.get(self.head or "")
            if head is None or not head.alive:
                return 1, {"error": "ConnectionError: Failed to connect to the dashboard"}
            now = time.monotonic()
            nodes: list[JsonValue] = [
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
            return command_result(
                node, "ray start", 1, "", "raylet exited unexpectedly (simulated)"
            )
        if not head and not head_alive:
            return command_result(node, "ray start", 1, "", "Failed to connect to GCS (simulated)")
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
        return command_result(node, "ray start", 0, f"{READY_TEXT}\n", "")

    def smoke_answer(self, hosts: Sequence[str]) -> tuple[int, JsonObject]:
        """The agent's ``smoke`` on the head: one task ran on every node Ray lists alive."""
        alive = set(self.registered())
        with self.lock:
            if not any(e.alive and e.is_head for e in self.ray.values()):
                return 1, {"error": "ConnectionError: no Ray cluster at the head's address"}
        ran: JsonObject = {h: {"node": h, "hostname": h} for h in hosts if h in alive}
        return 0, {"ran": ran}

    def stop_ray(self, node: Node) -> JsonObject:
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
        return command_result(node, "remove container", 0, f"{name}\n" if name else "", "")

    def probe_answer(self, node: Node, args: Sequence[str]) -> JsonObject:
        """The agent's ``probe``: the route to the head, and whether Ray runs here.

        With a container request (its fifth argument), a runtime that answers, has the
        image and the GPU hook, and rtk's container running where Ray runs.
        """
        self.model.sleep(self.model.probe_s)
        head_address = args[0] if args else ""
        running = node.name in self.running()
        request = json.loads(args[4]) if len(args) > 4 and args[4] else None
        answer: JsonObject = {
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
        if node.name in self.faults.gpu_settings_left:
            answer["gpu_restore_file"] = (
                f"{args[1] if len(args) > 1 else '/tmp'}/rtk/gpu-restore.json"
            )
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

    def facts_answer(self, node: Node, args: Sequence[str], request: ReachRequest) -> JsonObject:
        """Preflight's ``facts.py``: a healthy host, and the ports ``request`` names.

        A port is reached where Ray runs, unless ``Faults`` closes it on its node or
        cuts the pair.
        """
        self.model.sleep(self.model.facts_s)
        run_dir = args[0] if args else "~"
        up = self.running()
        faults = self.faults
        reach: JsonObject = {}
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
        answer: JsonObject = {
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

    def _ray_files(self, node: str, env_file: str) -> JsonObject:
        """As ``facts.ray_files`` reads them: the env file, and its TLS files when on."""
        with self.lock:
            env = self.files.get((node, env_file))
            if env is None:
                return {}
            text = env.decode()
            found: JsonObject = {"env": text}
            values = parse_env_file(text)
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


@functools.cache
def _this_rtk() -> JsonObject:
    """The probe's answer for a node with the same rtk as this process."""
    root = str(Path(toolkit.__file__).parent)
    return {"path": root, "digest": source_digest(root)}


def _refused() -> JsonObject:
    return {"ok": False, "error": "Connection refused"}


def command_result(node: Node, command: str, code: int, stdout: str, stderr: str) -> CommandResult:
    """What ``command`` did on ``node`` (its duration the transport measures)."""
    return CommandResult(node.name, command, code, stdout, stderr, 0.0)
