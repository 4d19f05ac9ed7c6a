"""``run_preflight`` over a scripted transport: facts read once per node, then graded.

The answers are this machine's real facts (``facts.py``'s functions run here); a node
whose answer is malformed fails ``connect.node`` with the field named, and the other
nodes are graded as usual (no Ray: the caller says which nodes are alive). At 1,024
nodes, the simulated transport answers (a closed port, a cut pair): the checks and the
lines stay bounded.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import yaml
from scripted_transport import ScriptedTransport, answer

from toolkit.cluster.plan import build_plan
from toolkit.inventory import load_inventory
from toolkit.node.facts import host_facts
from toolkit.nodeinfo import FACTS
from toolkit.nodeinfo.reach_request import request_in
from toolkit.preflight.runner import peer_plan, run_preflight
from toolkit.simulation import Faults, LatencyModel, SimulatedCluster, SimulatedTransport


def two_nodes(tmp_path: Path) -> Any:
    data = {
        "cluster": "scripted",
        "nodes": [{"host": "n1", "address": "10.0.0.1"}, {"host": "n2", "address": "10.0.0.2"}],
        "ray": {"auth": "none"},
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return build_plan(load_inventory(path))


def facts_here(tmp_path: Path) -> dict[str, Any]:
    data = host_facts(str(tmp_path / "run"))
    data["reach"] = {"n2:node_manager": {"ok": True, "ms": 0.5}}
    data["gpus"] = {"available": False, "reason": "no pynvml"}
    parsed: dict[str, Any] = json.loads(json.dumps(data))
    return parsed


def test_a_malformed_answer_fails_its_node_by_field_and_the_others_are_graded(
    tmp_path: Path,
) -> None:
    plan = two_nodes(tmp_path)
    good = facts_here(tmp_path)
    bad = {k: v for k, v in good.items() if k != "wall_s"}
    transport = ScriptedTransport().on("n1", r" - ", answer(good)).on("n2", r" - ", answer(bad))
    report = run_preflight(plan, transport, str(tmp_path / "run"), alive={"n1", "n2"})
    found = {(c.name, c.scope): c for c in report.checks}
    assert found[("connect.node", "n1")].status == "pass"
    assert found[("connect.node", "n1")].measured == socket.gethostname()
    failed = found[("connect.node", "n2")]
    assert failed.status == "fail"
    assert failed.measured == (
        "n2: malformed preflight facts from the node: field 'wall_s' should be a number, missing"
    )
    # n2's own checks stop at its answer; what n1 found of n2's port is n1's answer.
    assert {name for name, scope in found if scope == "n2"} == {
        "connect.node",
        "net.port.node_manager",
    }
    assert {"host.dev_shm", "host.disk_free", "software.python"} <= {
        name for name, scope in found if scope == "n1"
    }
    reached = found[("net.port.node_manager", "n2")]
    assert (reached.status, reached.measured) == ("pass", "reached from 1 of 1 peers")
    # Each node was sent its peers' ports inside the script, none on its command line.
    sent = {
        c.node: request_in(FACTS.source(), c.stdin or "")
        for c in transport.calls
        if c.kind == "run"
    }
    assert sent["n1"] is not None and sent["n2"] is not None
    assert sent["n1"].targets() == {
        "n2:node_manager": ("10.0.0.2", 6380),
        "n2:object_manager": ("10.0.0.2", 6381),
    }
    assert set(sent["n2"].targets()) == {
        f"n1:{p}" for p in ("node_manager", "object_manager", "gcs", "dashboard", "client_server")
    }
    assert all("10.0.0" not in c.command for c in transport.calls)
    assert report.reach is not None and report.reach.pairs == 2 and report.reach.mode == "all"
    assert report.exit_code == 1
    # The report's format is the checks'; the facts' types do not leak into it.
    assert json.loads(json.dumps(report.to_json()))["checks"][0]["name"] == "connect.node"


def simulated_plan(tmp_path: Path, count: int) -> Any:
    data = {
        "cluster": f"sim{count}",
        "nodes": [
            {"host": f"n{i:04d}", "address": f"10.0.{i // 256}.{i % 256}"}
            for i in range(1, count + 1)
        ],
        "ray": {"auth": "none"},
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return build_plan(load_inventory(path))


def test_1024_simulated_nodes_make_bounded_checks_and_lines_and_name_each_fault(
    tmp_path: Path,
) -> None:
    plan = simulated_plan(tmp_path, 1024)
    names = [n.node.name for n in plan.nodes]
    peers = peer_plan(plan, set(names))
    cut = ("n0500", peers.peers["n0500"][2])
    faults = Faults(ports_closed={"n0017": frozenset({"object_manager"})}, pairs_cut={cut})
    cluster = SimulatedCluster(LatencyModel(scale=0.0), faults)
    cluster.processes = set(names)  # Ray up everywhere
    with SimulatedTransport(cluster) as transport:
        report = run_preflight(plan, transport, str(tmp_path / "run"), alive=set(names))
    assert cluster.operations["facts"] == 1024
    ports = [c for c in report.checks if c.name.startswith("net.port.")]
    # A check per node and port, not per pair (2.1 million before).
    assert 2 * 1024 <= len(ports) <= 2 * 1024 + 3 + 2
    assert len(report.checks) < 20 * 1024
    failed = [(c.name, c.scope) for c in report.failed()]
    assert failed == [
        ("net.port.object_manager", "n0017"),
        ("net.port.node_manager", f"{cut[0]}->{cut[1]}"),
        ("net.port.object_manager", f"{cut[0]}->{cut[1]}"),
    ]
    testers = peers.testers()["n0017"]
    closed = next(c for c in report.failed() if c.scope == "n0017")
    assert closed.measured == f"object_manager port 6381 refused from {testers} of {testers} peers"
    assert [e.node for e in report.exclusions()] == ["n0017"]
    assert report.reach is not None and report.reach.mode == "ring+8"
    assert report.reach.pairs == peers.pairs < 10 * 1024
    assert report.reach.testers_min >= 3
    assert len(json.dumps(report.to_json()["reach"])) < 4000
    lines = report.render().splitlines()
    assert len(lines) <= 40, "\n".join(lines)
    assert any("n0017" in line and "refused from" in line for line in lines)


def test_1024_healthy_simulated_nodes_print_a_few_lines(tmp_path: Path) -> None:
    plan = simulated_plan(tmp_path, 1024)
    names = {n.node.name for n in plan.nodes}
    cluster = SimulatedCluster(LatencyModel(scale=0.0))
    cluster.processes = set(names)
    with SimulatedTransport(cluster) as transport:
        report = run_preflight(plan, transport, str(tmp_path / "run"), alive=names)
    assert report.exit_code == 0
    lines = report.render().splitlines()
    assert len(lines) <= 12, "\n".join(lines)
    assert lines[-1] == f"  all {len(report.checks)} checks passed"
