"""``ProbeFacts``: the agent's probe answer read once on the host, or refused by field.

The answers are the real agent's (its ``probe`` run here, and ``network_facts`` on the
recorded sysfs trees); the malformed ones are those answers with one field broken.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from toolkit.errors import ClusterError
from toolkit.node import agent
from toolkit.nodeinfo.probe import ProbeFacts, RouteFacts

ROCE = str(REPO / "tests" / "data" / "sysfs" / "roce")


def as_sent(data: dict[str, Any]) -> dict[str, Any]:
    """What the host receives: the answer through JSON, as the agent prints it."""
    parsed: dict[str, Any] = json.loads(json.dumps(data))
    return parsed


@pytest.fixture
def roce_answer() -> dict[str, Any]:
    network = agent.network_facts("eth0", ROCE) | {"interface_source": "route"}
    return as_sent(
        {
            "hostname": "n2",
            "python": "3.12.3",
            "route": {"head_ip": "10.10.0.11", "source_ip": "10.10.0.12", "interface": "eth0"},
            "network": network,
            "rtk_pids": [4121, 4133],
            "raylet_running": True,
            "busy_ports": [],
        }
    )


def test_the_agents_probe_here_reads_and_writes_back_unchanged(tmp_path: Path) -> None:
    data = as_sent(agent.probe("127.0.0.1", str(tmp_path / "cluster"), "1,2", ""))
    facts = ProbeFacts.from_json("here", data)
    assert facts.node == "here" and facts.hostname == data["hostname"]
    assert facts.python_version == data["python"]
    assert facts.rtk_pids == () and facts.raylet_running is False
    assert facts.to_json() == data
    assert ProbeFacts.from_json("here", facts.to_json()) == facts


def test_a_recorded_answer_reads_into_typed_fields(roce_answer: dict[str, Any]) -> None:
    facts = ProbeFacts.from_json("n2", roce_answer)
    assert facts.route == RouteFacts("10.10.0.11", "10.10.0.12", "eth0")
    assert facts.rtk_pids == (4121, 4133) and facts.raylet_running is True
    assert facts.busy_ports == ()
    assert facts.network.interface == "eth0"
    assert "mlx5_0:1" in [p.name for p in facts.network.ports]
    assert facts.detected() == {"node_ip": "10.10.0.12", "interface": "eth0"}
    assert facts.to_json() == roce_answer


def test_a_route_error_reads_and_writes_back_alone(roce_answer: dict[str, Any]) -> None:
    data = roce_answer | {"route": {"error": "cannot resolve head address 'h': boom"}}
    facts = ProbeFacts.from_json("n2", data)
    assert facts.route.error == "cannot resolve head address 'h': boom"
    assert facts.route.source_ip is None and facts.detected()["node_ip"] is None
    assert facts.to_json() == data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"route": None}, "field 'route' should be an object, got None"),
        ({"network": "eth0"}, "field 'network' should be an object, got 'eth0'"),
        ({"raylet_running": "yes"}, "field 'raylet_running' should be true or false, got 'yes'"),
        ({"raylet_running": None}, "field 'raylet_running' should be true or false, got None"),
        ({"rtk_pids": [1, "2"]}, "field 'rtk_pids[1]' should be an integer, got '2'"),
        ({"busy_ports": 6379}, "field 'busy_ports' should be a list of integers, got 6379"),
        (
            {"route": {"head_ip": "10.10.0.11", "source_ip": 12}},
            "field 'route.source_ip' should be a string or null, got 12",
        ),
    ],
)
def test_a_field_of_the_wrong_type_is_named_with_the_node(
    roce_answer: dict[str, Any], change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ClusterError) as caught:
        ProbeFacts.from_json("n2", roce_answer | change)
    assert str(caught.value) == f"n2: malformed probe answer from the node: {message}"


@pytest.mark.parametrize("field", ["route", "network", "rtk_pids", "raylet_running", "busy_ports"])
def test_a_missing_required_field_is_named(roce_answer: dict[str, Any], field: str) -> None:
    del roce_answer[field]
    with pytest.raises(ClusterError, match=rf"^n2: .* field '{field}' should be .*, missing$"):
        ProbeFacts.from_json("n2", roce_answer)


def test_optional_fields_may_be_absent(roce_answer: dict[str, Any]) -> None:
    del roce_answer["hostname"], roce_answer["python"]
    facts = ProbeFacts.from_json("n2", roce_answer)
    assert facts.hostname is None and facts.python_version is None


def test_an_answer_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ClusterError, match=r"^n2: .* field '\(the answer\)' should be an object"):
        ProbeFacts.from_json("n2", [1, 2])
