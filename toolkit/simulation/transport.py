"""The transport that reaches a ``SimulatedCluster``: one connection per node, like SSH's.

A connection opens on first use at the cost of a handshake and is reused for every
step after; each command is read for what it is (a node script, ``ray start``, rtk's
container removal) and answered by the cluster.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Mapping
from pathlib import Path

from toolkit.errors import TransportError
from toolkit.inventory import Node
from toolkit.json_types import JsonObject
from toolkit.nodeinfo.reach_request import request_in
from toolkit.nodeinfo.script import AGENT, FACTS
from toolkit.simulation.node_side import SimulatedCluster, command_result
from toolkit.transport.base import CommandResult, Transport
from toolkit.transport.pool import ConnectionPool

_AGENT_WORD = re.compile(r"^(probe|stop|status|smoke|pack)$")
# rtk's container commands (``cluster.containers.docker``): start, removal, exec.
_CONTAINER_RUN = re.compile(r"^(docker|podman) run -d --name (\S+) ")
_CONTAINER_REMOVE = re.compile(r"^command -v (docker|podman) >/dev/null \|\| exit 0; ids=")


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
            if word == "smoke":
                hosts = args[1].split(",") if len(args) > 1 else []
                code, data = cluster.smoke_answer(hosts)
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
        return command_result(node, command, 0, "", "")


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


def _json(node: Node, command: str, data: JsonObject, code: int = 0) -> CommandResult:
    return command_result(node, command, code, json.dumps(data) + "\n", "")
