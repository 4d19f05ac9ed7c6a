"""The agent's stop answer as a typed record: ``rtk down --json`` prints it as answered."""

from __future__ import annotations

import pytest

from toolkit.errors import ClusterError
from toolkit.lifecycle.down import DownResult, NodeStopped


def test_the_answer_prints_back_as_the_agent_wrote_it() -> None:
    answer = {"stopped": 5, "killed": 1, "left": [4242], "removed": False}
    stopped = NodeStopped.from_answer("n1", answer)
    assert stopped.left == (4242,) and stopped.removed is False
    assert stopped.to_json() == answer
    short = {"stopped": 0, "killed": 0, "left": []}  # an agent that says nothing of its dir
    assert NodeStopped.from_answer("n2", short).to_json() == short
    with_container = NodeStopped(3, 0, (), True, ("abc",))
    result = DownResult("c", {"n1": stopped, "n3": with_container}, {"n4": "unreachable"})
    assert result.to_json() == {
        "cluster": "c",
        "stopped": {
            "n1": answer,
            "n3": {
                "stopped": 3,
                "killed": 0,
                "left": [],
                "removed": True,
                "containers_removed": ["abc"],
            },
        },
        "failed": {"n4": "unreachable"},
    }


def test_a_malformed_answer_names_the_node_and_the_field() -> None:
    with pytest.raises(ClusterError, match=r"n1: malformed stop answer .*'left'"):
        NodeStopped.from_answer("n1", {"stopped": 1, "killed": 0, "left": "none"})
