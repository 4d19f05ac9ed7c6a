"""The simulated transport's model: what each operation costs and what the nodes keep."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from toolkit.cluster.plan import ClusterPlan, build_plan
from toolkit.cluster.ray_status import cluster_status
from toolkit.errors import TransportError
from toolkit.inventory import load_inventory
from toolkit.nodeinfo import FACTS
from toolkit.nodeinfo.reach_request import PeerPorts, ReachRequest, script_with
from toolkit.simulation import (
    Faults,
    LatencyModel,
    SimulatedCluster,
    SimulatedTransport,
    pick_nodes,
)


def three_nodes(tmp_path: Path) -> ClusterPlan:
    data = {
        "cluster": "sim",
        "nodes": [{"host": f"n{i}", "address": f"10.0.0.{i}", "gpus": 2} for i in (1, 2, 3)],
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return build_plan(load_inventory(path))


def timed(action: Callable[[], object]) -> float:
    began = time.monotonic()
    action()
    return time.monotonic() - began


def test_the_handshake_is_paid_once_per_node_per_transport(tmp_path: Path) -> None:
    plan = three_nodes(tmp_path)
    model = LatencyModel(handshake_s=10.0, round_trip_s=0.0, scale=0.02)  # 0.2 s each
    cluster = SimulatedCluster(model)
    node = plan.nodes[1].node
    with SimulatedTransport(cluster) as transport:
        assert timed(lambda: transport.run(node, "true")) >= 0.2
        assert timed(lambda: transport.run(node, "true")) < 0.1
        assert timed(lambda: transport.put(node, "/tmp/x", b"1")) < 0.1
    with SimulatedTransport(cluster) as transport:
        assert timed(lambda: transport.run(node, "true")) >= 0.2
    assert cluster.connections == 2


def test_an_unreachable_node_fails_every_call_after_its_timeout(tmp_path: Path) -> None:
    node = three_nodes(tmp_path).nodes[2].node
    cluster = SimulatedCluster(
        LatencyModel(unreachable_s=5.0, scale=0.02), Faults(unreachable=frozenset({"n3"}))
    )
    with SimulatedTransport(cluster) as transport:
        for _ in range(2):
            began = time.monotonic()
            with pytest.raises(TransportError, match=r"^n3: SSH to 10\.0\.0\.3 timed out"):
                transport.run(node, "true")
            assert time.monotonic() - began >= 0.1
    assert cluster.connections == 0


def test_ray_starts_register_in_the_view_the_status_command_reads(tmp_path: Path) -> None:
    plan = three_nodes(tmp_path)
    cluster = SimulatedCluster(
        LatencyModel(scale=0.001),
        Faults(start_fails=frozenset({"n3"}), join_late_s={"n2": 200.0}),
    )
    with SimulatedTransport(cluster) as transport:
        down = cluster_status(plan, transport)
        assert down.error is not None and "Failed to connect" in down.error
        worker = plan.nodes[1]
        early = transport.start_daemon(worker.node, worker.start_command, "", 10)
        assert not early.ok and "GCS" in early.stderr  # no head yet
        for node_plan in plan.nodes:
            transport.start_daemon(node_plan.node, node_plan.start_command, "", 10)
        status = cluster_status(plan, transport)
        assert status.error is None and status.ready == ["n1"]  # n2 joins 0.2 s later
        time.sleep(0.25)
        status = cluster_status(plan, transport)
        assert status.ready == ["n1", "n2"]
        assert {n.name: n.resources["GPU"] for n in status.nodes if n.alive} == {
            "n1": 2.0,
            "n2": 2.0,
        }
    assert cluster.running() == {"n1", "n2"}
    assert cluster.operations["ray start"] == 4


def test_the_state_survives_a_save_and_a_load(tmp_path: Path) -> None:
    plan = three_nodes(tmp_path)
    cluster = SimulatedCluster(LatencyModel(scale=0.0))
    with SimulatedTransport(cluster) as transport:
        for node_plan in plan.nodes:
            transport.start_daemon(node_plan.node, node_plan.start_command, "", 10)
            transport.put(node_plan.node, plan.paths.env_file, b"RTK_NODE=x\n\xff")
    cluster.save(tmp_path / "state.json")
    again = SimulatedCluster(LatencyModel(scale=0.0))
    again.load(tmp_path / "state.json")
    assert again.running() == {"n1", "n2", "n3"}
    assert again.files == cluster.files
    with SimulatedTransport(again) as transport:
        assert cluster_status(plan, transport).ready == ["n1", "n2", "n3"]


@pytest.mark.parametrize("record_order", [False, True])
def test_the_order_of_operations_is_kept_only_when_asked(
    tmp_path: Path, record_order: bool
) -> None:
    """Every operation is counted; the list of them, which grows with each, only on request."""
    plan = three_nodes(tmp_path)
    cluster = SimulatedCluster(LatencyModel(scale=0.0), record_order=record_order)
    with SimulatedTransport(cluster) as transport:
        node = plan.nodes[0].node
        transport.put(node, plan.paths.env_file, b"RTK_NODE=n1\n")
        transport.start_daemon(node, plan.nodes[0].start_command, "", 10)
        transport.run(node, "true")
    assert cluster.operations == {"put": 1, "ray start": 1, "command": 1}
    assert cluster.order == (["put", "ray start", "command"] if record_order else [])


def test_pick_nodes_is_a_fixed_share_for_a_seed() -> None:
    names = [f"n{i}" for i in range(1000)]
    picked = pick_nodes(names, 0.01, seed=3)
    assert len(picked) == 10 and picked <= set(names)
    assert picked == pick_nodes(names, 0.01, seed=3)
    assert pick_nodes(names, 0.01, seed=4) != picked
    assert len(pick_nodes(names[:10], 0.01)) == 1
    assert pick_nodes(names, 0.0) == frozenset()


def test_the_facts_script_is_answered_for_the_ports_its_text_carries(tmp_path: Path) -> None:
    plan = three_nodes(tmp_path)
    n1, n2, n3 = (p.node for p in plan.nodes)
    cluster = SimulatedCluster(
        LatencyModel(scale=0.0),
        Faults(ports_closed={"n2": frozenset({"gcs"})}, pairs_cut=frozenset({("n1", "n3")})),
    )
    cluster.processes = {"n2", "n3"}
    request = ReachRequest(
        {"gcs": 6379, "node_manager": 6380},
        (
            PeerPorts("n2", n2.address, ("gcs", "node_manager")),
            PeerPorts("n3", n3.address, ("node_manager",)),
        ),
    )
    with SimulatedTransport(cluster) as transport:
        result = transport.run(
            n1, FACTS.command(n1, "~", "0"), stdin=script_with(FACTS.source(), request)
        )
        # Any other script is not the facts script, whatever it carries.
        other = transport.run(n1, "python3 -", stdin="print(1)\n")
    reach = json.loads(result.stdout)["reach"]
    assert reach == {
        "n2:gcs": {"ok": False, "error": "Connection refused"},
        "n2:node_manager": {"ok": True, "ms": 0.2},
        "n3:node_manager": {"ok": False, "error": "timed out after 2 s (filtered?)"},
    }
    assert cluster.operations["facts"] == 1 and other.stdout == ""
