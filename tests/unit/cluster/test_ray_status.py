"""Ray's view of the inventory's nodes: the head's ``status`` answer, matched to them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from scripted_transport import ScriptedTransport, answer

from toolkit.cluster.plan import build_plan
from toolkit.cluster.ray_status import RayNodeEntry, cluster_status, ray_nodes
from toolkit.errors import ClusterError
from toolkit.inventory import load_inventory
from toolkit.ray_resources import host_resource

ADDRESSES = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}


def plan(tmp_path: Path) -> Any:
    data = {
        "cluster": "three",
        "nodes": [
            {"host": name, "address": address, "gpus": 1} for name, address in ADDRESSES.items()
        ],
        "ray": {"auth": "none"},
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return build_plan(load_inventory(path))


def entry(name: str, state: str = "ALIVE", gpus: float = 1.0) -> dict[str, Any]:
    return {
        "node_id": f"id-{name}-{state}",
        "node_ip": ADDRESSES[name],
        "state": state,
        "is_head": name == "n1",
        "resources": {host_resource(name): 1.0, "GPU": gpus, "CPU": 4},
    }


def status_of(tmp_path: Path, data: dict[str, Any]) -> Any:
    transport = ScriptedTransport()
    transport.on("n1", r" - status ", answer(data))
    return cluster_status(plan(tmp_path), transport)


def test_the_answer_reads_as_records() -> None:
    version, entries = ray_nodes("n1", {"ray_version": "2.60.0", "nodes": [entry("n2")]})
    assert version == "2.60.0"
    assert entries == [
        RayNodeEntry(
            node_id="id-n2-ALIVE",
            node_ip="10.0.0.2",
            alive=True,
            resources={host_resource("n2"): 1.0, "GPU": 1.0, "CPU": 4.0},
        )
    ]
    assert ray_nodes("n1", {"nodes": [{"state": "DEAD"}]}) == (
        None,
        [RayNodeEntry(node_id=None, node_ip=None, alive=False, resources={})],
    )


def test_a_malformed_entry_names_the_node_and_the_field() -> None:
    broken = {"nodes": [entry("n2"), {**entry("n3"), "resources": {"GPU": "one"}}]}
    with pytest.raises(
        ClusterError, match=r"n1: malformed status answer .*'nodes\[1\]\.resources\.GPU'"
    ):
        ray_nodes("n1", broken)
    with pytest.raises(ClusterError, match="'nodes' should be a list of nodes"):
        ray_nodes("n1", {"nodes": {"n2": entry("n2")}})


def test_nodes_match_by_their_host_resource_and_short_ones_are_named(tmp_path: Path) -> None:
    nodes = [entry("n1"), entry("n2", gpus=0.0), entry("n3", state="DEAD")]
    status = status_of(tmp_path, {"ray_version": "2.60.0", "nodes": nodes})
    assert status.error is None and status.ray_version == "2.60.0"
    assert status.ready == ["n1"]
    n1, n2, n3 = status.nodes
    assert (n1.alive, n1.node_ip, n1.ray_node_ids) == (True, "10.0.0.1", ["id-n1-ALIVE"])
    assert n1.resources["CPU"] == 4.0
    assert n2.alive and n2.problem == "joined with 0 GPU, expected 1"
    assert not n3.alive and n3.node_ip is None


def test_two_live_entries_for_one_host_are_a_stale_one(tmp_path: Path) -> None:
    nodes = [entry("n1"), {**entry("n1"), "node_id": "id-n1-new"}]
    n1 = status_of(tmp_path, {"ray_version": "2.60.0", "nodes": nodes}).nodes[0]
    assert n1.ray_node_ids == ["id-n1-ALIVE", "id-n1-new"]
    assert n1.problem is not None and n1.problem.startswith("2 live Ray nodes claim this host")


def test_a_malformed_answer_is_the_status_error_not_a_crash(tmp_path: Path) -> None:
    status = status_of(tmp_path, {"ray_version": "2.60.0", "nodes": [{"state": 3}]})
    assert status.error is not None and "'nodes[0].state' should be a string" in status.error
    assert status.ready == []
