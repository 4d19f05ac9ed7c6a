"""startdiag.py's answer read into typed facts; a wrong field names the node."""

from __future__ import annotations

from pathlib import Path

import pytest
from scripted_transport import ScriptedTransport, startdiag_answer, startdiag_pattern

from toolkit.errors import ClusterError
from toolkit.inventory.loader import parse_inventory
from toolkit.nodeinfo.start_facts import StartDiagFacts, TempDirFacts, read_start_diag


def test_the_answer_is_read_whole(tmp_path: Path) -> None:
    reply = startdiag_answer(
        holders={"6380": "nc (pid 7)"},
        reach={"6379": "timed out", "6381": None},
        log_errors=("raylet.out: [E] x",),
    )
    transport = ScriptedTransport().on("n2", startdiag_pattern("/tmp/rtk"), reply)
    text = "cluster: c\nnodes:\n  - host: n1\n    address: 10.0.0.1\n  - host: n2\n    address: 10.0.0.2\n"
    node = parse_inventory(text, "c.yaml", tmp_path).nodes[1]
    facts = read_start_diag(transport, node, "/tmp/rtk", (6380, 6381), "10.0.0.1", (6379, 6381))
    assert transport.calls[0].command.endswith(" - /tmp/rtk 6380,6381 10.0.0.1 6379,6381")
    assert facts.node == "n2" and facts.ray.version == "2.60.0"
    assert facts.port_holders == {6380: "nc (pid 7)"}
    assert facts.reach == {6379: "timed out", 6381: None}
    assert facts.log_errors == ("raylet.out: [E] x",)
    assert TempDirFacts.read(_fields(facts.temp_dir.to_json())) == facts.temp_dir


def test_a_wrong_field_names_the_node_and_the_field() -> None:
    with pytest.raises(ClusterError, match=r"n3: .*temp_dir\.free_bytes"):
        StartDiagFacts.from_json(
            "n3",
            {
                "hostname": "h",
                "temp_dir": {"path": "/t", "exists": True, "free_bytes": "lots"},
                "ray": {"executable": "/p"},
                "reach": {},
                "logs": {"tails": {}},
            },
        )


def _fields(data: dict[str, object]):  # type: ignore[no-untyped-def]
    from toolkit.nodeinfo.answer_errors import answer_fields

    return answer_fields("n2", "temp dir", data)
