"""``rtk up``, ``down`` and ``exec`` on nodes whose Ray runs in a container.

A scripted transport plays three nodes; each node has its own fake docker/podman
(``tests/fake_runtime.py``, its own state file), and every container command the
executor sends (start, removal, exec) is run there by ``sh`` for real. The node agent's
probe is scripted, its container part computed by the agent's own ``container_facts``
against the node's fake runtime; Ray's view is the set of nodes whose container runs.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import fake_runtime
import pytest
import yaml
from conftest import REPO
from scripted_transport import (
    Call,
    Reply,
    ScriptedTransport,
    answer,
    startdiag_answer,
    startdiag_pattern,
)

from toolkit.cluster.command import run_everywhere
from toolkit.cluster.plan import ClusterPlan, build_plan
from toolkit.cluster.progress_reporter import QuietReporter
from toolkit.errors import ClusterError
from toolkit.inventory import load_inventory
from toolkit.lifecycle.down import down
from toolkit.lifecycle.start import UpResult, up
from toolkit.node.agent import network_facts
from toolkit.nodeinfo import agent_source
from toolkit.ray_resources import host_resource
from toolkit.state.store import StateStore

ETHERNET = str(REPO / "tests" / "data" / "sysfs" / "ethernet")
ADDRESSES = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}
GPUS = {"n1": 1.0, "n2": 1.0}
LABELS = {name: {"rtk.cluster": "boxed", "rtk.node": name} for name in ADDRESSES}
# The agent is a stdlib script: loaded from the text rtk sends, without the rest of rtk.
FACTS = (
    "import importlib.util, json, sys\n"
    "spec = importlib.util.spec_from_file_location('agent', sys.argv[1])\n"
    "agent = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(agent)\n"
    "print(json.dumps(agent.container_facts(sys.argv[2])))\n"
)


class Nodes:
    """Each node's fake runtime: a state file, and the environment its shell runs in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.agent = root / "agent.py"
        root.mkdir(parents=True, exist_ok=True)
        self.agent.write_text(agent_source(), encoding="utf-8")
        for name in ADDRESSES:
            fake_runtime.install(self.bin, self.state(name))

    def state(self, node: str) -> Path:
        path = self.root / node / "runtime.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def env(self, node: str) -> dict[str, str]:
        return {
            **os.environ,
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "FAKE_RUNTIME_STATE": str(self.state(node)),
        }

    def sh(self, call: Call) -> Reply:
        done = subprocess.run(
            ["sh", "-c", call.command],
            capture_output=True,
            text=True,
            env=self.env(call.node),
            timeout=60,
            check=False,
        )
        return Reply(done.returncode, done.stdout, done.stderr)

    def container_facts(self, node: str, request: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-c", FACTS, str(self.agent), request],
            capture_output=True,
            text=True,
            env=self.env(node),
            timeout=60,
            check=True,
        )
        facts: dict[str, Any] = json.loads(done.stdout)
        return facts

    def running(self, node: str) -> bool:
        return any(
            c["name"] == f"rtk-boxed-{node}" and c["state"] == "running"
            for c in fake_runtime.load(self.state(node))["containers"]
        )

    def containers(self, node: str) -> dict[str, dict[str, Any]]:
        return {c["name"]: c for c in fake_runtime.load(self.state(node))["containers"]}

    def set(self, node: str, **values: Any) -> None:
        data = fake_runtime.load(self.state(node))
        data.update(values)
        fake_runtime.save(self.state(node), data)


def transport_for(nodes: Nodes) -> ScriptedTransport:
    transport = ScriptedTransport()

    def probe(call: Call) -> Reply:
        route = {"head_ip": ADDRESSES["n1"], "source_ip": ADDRESSES[call.node], "interface": "eth0"}
        return answer(
            {
                "route": route,
                "network": {**network_facts("eth0", ETHERNET), "interface_source": "route"},
                "rtk_pids": [],
                "raylet_running": False,
                "busy_ports": [],
                "rtk_source": {"path": "/opt/rtk/toolkit", "digest": "f00d"},
                "container": nodes.container_facts(call.node, shlex.split(call.command)[-1]),
            }
        )

    def status(call: Call) -> Reply:
        alive = [
            {
                "node_id": f"id-{name}",
                "state": "ALIVE",
                "node_ip": address,
                "resources": {host_resource(name): 1.0, "CPU": 4.0}
                | ({"GPU": GPUS[name]} if name in GPUS else {}),
            }
            for name, address in ADDRESSES.items()
            if nodes.running(name)
        ]
        return answer({"ray_version": "2.60.0", "nodes": alive})

    transport.on("*", r" - probe ", probe)
    transport.on("n1", r" - status ", status)
    transport.on("*", r" - stop ", answer({"stopped": 0, "killed": 0, "left": []}))
    # The hosts have no Ray of their own: their containers do.
    transport.on("*", startdiag_pattern("/tmp/rtk-boxed"), startdiag_answer(ray_version=None))
    transport.on("*", r"^(docker|podman) (run|exec) ", nodes.sh)
    transport.on("*", r"^command -v (docker|podman) .*; ids=\$\(", nodes.sh)
    return transport


def plan_of(tmp_path: Path, min_nodes: int = 3, n3: dict[str, Any] | None = None) -> ClusterPlan:
    data: dict[str, Any] = {
        "cluster": "boxed",
        "min_nodes": min_nodes,
        "defaults": {"container": {"runtime": "docker", "image": "ray:quick"}},
        "nodes": [
            {"host": "n[1-2]", "address": "10.0.0.[1-2]", "gpus": 1},
            {"host": "n3", "address": "10.0.0.3", "container": n3 or {"runtime": "podman"}},
        ],
        "ray": {"auth": "none", "wait_timeout_s": 10, "start_timeout_s": 30},
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return build_plan(load_inventory(path))


@pytest.fixture
def nodes(tmp_path: Path) -> Nodes:
    return Nodes(tmp_path / "nodes")


def bring_up(plan: ClusterPlan, transport: ScriptedTransport, tmp_path: Path) -> UpResult:
    store = StateStore(plan.inventory.name, root=tmp_path / "state")
    return up(plan, transport, store, QuietReporter())


def outcome(result: UpResult, name: str) -> Any:
    return next(n for n in result.nodes if n.name == name)


def calls_on(transport: ScriptedTransport, node: str) -> list[str]:
    return [c.command for c in transport.calls if c.node == node and c.kind != "put"]


def test_up_starts_one_container_per_node_with_the_plans_commands(
    tmp_path: Path, nodes: Nodes
) -> None:
    plan = plan_of(tmp_path)
    transport = transport_for(nodes)
    result = bring_up(plan, transport, tmp_path)
    assert result.started == ["n1", "n2", "n3"]
    starts = sorted(c.command for c in transport.calls if c.kind == "start_daemon")
    assert starts == sorted(n.start_command for n in plan.nodes)
    for name in ADDRESSES:
        (box,) = nodes.containers(name).values()
        assert (box["name"], box["state"], box["labels"]) == (
            f"rtk-boxed-{name}",
            "running",
            LABELS[name],
        )
    calls = fake_runtime.load(nodes.state("n3"))["calls"]
    assert calls[0] == "podman version --format '{{.Client.Version}}'"  # the probe's
    assert any(c.startswith("podman run -d --name rtk-boxed-n3 ") for c in calls)
    # Ray in the container does not import the host's rtk: jobs ship theirs.
    assert {outcome(result, n).rtk_digest for n in ADDRESSES} == {None}


def test_up_again_leaves_the_running_containers(tmp_path: Path, nodes: Nodes) -> None:
    plan = plan_of(tmp_path)
    bring_up(plan, transport_for(nodes), tmp_path)
    ids = {n: list(nodes.containers(n).values())[0]["id"] for n in ADDRESSES}
    again = transport_for(nodes)
    result = bring_up(plan, again, tmp_path)
    assert {o.action for o in result.nodes} == {"already running"}
    assert not [c for c in again.calls if c.kind == "start_daemon"]
    assert {n: list(nodes.containers(n).values())[0]["id"] for n in ADDRESSES} == ids


def test_a_leftover_container_is_removed_before_the_start(tmp_path: Path, nodes: Nodes) -> None:
    plan = plan_of(tmp_path)
    old = fake_runtime.add_container(
        nodes.state("n2"), "rtk-boxed-n2", LABELS["n2"], "ray:quick", running=False
    )
    transport = transport_for(nodes)
    result = bring_up(plan, transport, tmp_path)
    assert outcome(result, "n2").action == "started"
    box = nodes.containers("n2")["rtk-boxed-n2"]
    assert box["id"] != old and box["state"] == "running"
    n2 = calls_on(transport, "n2")
    removal = next(i for i, c in enumerate(n2) if "; ids=$(docker ps " in c)
    start = next(i for i, c in enumerate(n2) if c.startswith("docker run -d "))
    assert removal < start


def test_a_node_without_the_image_fails_before_anything_starts(
    tmp_path: Path, nodes: Nodes
) -> None:
    plan = plan_of(tmp_path, min_nodes=2)
    nodes.set("n2", images=[], runtimes={"runc": {}})
    transport = transport_for(nodes)
    result = bring_up(plan, transport, tmp_path)
    assert result.started == ["n1", "n3"]
    failed = outcome(result, "n2")
    assert failed.action == "failed"
    assert failed.error == (
        "n2: no image ray:quick on the node: put it there: `docker load -i FILE.tar` (from "
        "`docker save` where it was built), or `docker pull ray:quick` where a registry is "
        "reachable; docker cannot hand GPUs to a container here: install the NVIDIA "
        "Container Toolkit and run `nvidia-ctk runtime configure --runtime=docker`, then "
        "restart docker; or set container.gpus: none for a node whose container needs no GPU"
    )
    assert not [c for c in transport.calls if c.node == "n2" and c.kind in ("put", "start_daemon")]
    assert nodes.containers("n2") == {}


def test_a_container_whose_ray_dies_fails_its_node_and_is_gone(
    tmp_path: Path, nodes: Nodes
) -> None:
    plan = plan_of(tmp_path, min_nodes=2, n3={"runtime": "podman", "image": "ray:crash"})
    transport = transport_for(nodes)
    result = bring_up(plan, transport, tmp_path)
    assert result.started == ["n1", "n2"]
    failed = outcome(result, "n3")
    assert failed.error == (
        "a port Ray binds is taken (raylet exited: address already in use); "
        "choose other ports in the inventory's ports: section"
    )
    assert failed.detail.startswith("rtk: Ray did not start in container ")
    assert nodes.containers("n3") == {}


def test_down_removes_exactly_rtks_containers(tmp_path: Path, nodes: Nodes) -> None:
    plan = plan_of(tmp_path)
    bring_up(plan, transport_for(nodes), tmp_path)
    foreign = {
        "rtk-other-n1": {"rtk.cluster": "other", "rtk.node": "n1"},
        "rtk-boxed-n1-debug": {"rtk.cluster": "boxed", "rtk.node": "n1"},
        "jupyter": {},
    }
    for name in ADDRESSES:
        for box, labels in foreign.items():
            fake_runtime.add_container(nodes.state(name), box, labels)
    transport = transport_for(nodes)
    store = StateStore(plan.inventory.name, root=tmp_path / "state")
    result = down(plan, transport, store, QuietReporter())
    assert result.failed == {}
    for name in ADDRESSES:
        assert set(nodes.containers(name)) == set(foreign)
        assert len(result.stopped[name].containers_removed or ()) == 1
        removal, stop = calls_on(transport, name)
        assert removal == next(n.container for n in plan.nodes if n.name == name).remove_command(8)
        assert " - stop " in stop
    assert store.load() is None


def test_down_names_a_node_whose_runtime_does_not_answer(tmp_path: Path, nodes: Nodes) -> None:
    plan = plan_of(tmp_path)
    bring_up(plan, transport_for(nodes), tmp_path)
    nodes.set("n2", down=True)
    transport = transport_for(nodes)
    store = StateStore(plan.inventory.name, root=tmp_path / "state")
    result = down(plan, transport, store, QuietReporter())
    assert list(result.failed) == ["n2"]
    assert result.failed["n2"].startswith(
        "n2: cannot remove container rtk-boxed-n2 (docker): Cannot connect to the docker daemon"
    )
    assert not [c for c in calls_on(transport, "n2") if " - stop " in c]
    assert store.load() is not None  # kept: rtk down again once docker answers


def test_exec_runs_inside_each_nodes_container(tmp_path: Path, nodes: Nodes) -> None:
    plan = plan_of(tmp_path)
    bring_up(plan, transport_for(nodes), tmp_path)
    transport = transport_for(nodes)
    runs = run_everywhere(plan, transport, ["echo", "inside"])
    assert [(r.node, r.exit_code, r.stdout) for r in runs] == [
        (name, 0, "inside\n") for name in ADDRESSES
    ]
    assert calls_on(transport, "n3")[0].startswith("podman exec -i rtk-boxed-n3 sh -c ")
    nodes.set("n3", containers=[])
    runs = run_everywhere(plan, transport, ["echo", "inside"])
    assert (runs[2].exit_code, runs[2].stdout) == (1, "")


def test_up_refuses_pyxis_and_touches_nothing(tmp_path: Path, nodes: Nodes) -> None:
    plan = plan_of(tmp_path, n3={"runtime": "pyxis", "image": "nvcr.io#pytorch"})
    transport = transport_for(nodes)
    with pytest.raises(ClusterError, match=r"n3: container.runtime pyxis: pyxis exists only"):
        bring_up(plan, transport, tmp_path)
    assert transport.calls == []
