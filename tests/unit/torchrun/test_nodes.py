"""The torchrun driver's refusals before anything starts, and its one-line outcome at any N."""

from __future__ import annotations

from toolkit.torchrun.node_runner import NodeFacts
from toolkit.torchrun.nodes import outcome, problems
from toolkit.torchrun.spec import TorchrunSpec


def facts(n: int, missing: set[int] = frozenset(), taken: bool = False) -> list[NodeFacts]:
    return [
        NodeFacts(f"node{i:03d}", f"10.0.0.{i}", i not in missing, taken and i == 0)
        for i in range(n)
    ]


def test_a_healthy_cluster_has_no_problems() -> None:
    assert problems(TorchrunSpec("t.py"), facts(3), [0, 0, 0]) == []


def test_the_nodes_without_the_script_are_one_line() -> None:
    lines = problems(TorchrunSpec("t.py"), facts(1000, missing={5, 6, 7}), [0] * 1000)
    assert len(lines) == 1
    assert "t.py: no such file on 3 node(s) (node[005-007])" in lines[0]


def test_a_taken_port_names_the_head_and_the_way_out() -> None:
    (line,) = problems(TorchrunSpec("t.py", rdzv_port=29411), facts(2, taken=True), [0, 0])
    assert "29411" in line and "node000 (10.0.0.0)" in line and "--rdzv-port" in line


def test_too_many_ranks_for_a_gpu_node_is_said_once() -> None:
    lines = problems(TorchrunSpec("t.py", nproc_per_node=4), facts(3), [2, 2, 2])
    assert len(lines) == 1 and "node000 has 2 GPU(s)" in lines[0]


def test_the_outcome_groups_nodes_by_exit_status() -> None:
    names = [f"n{i:04d}" for i in range(1000)]
    codes = dict.fromkeys(range(1000), 0) | {17: 1}
    line = outcome(names, codes)
    assert line.startswith("999 node(s) exited 0 (") and "1 node(s) exited 1 (n0017)" in line
    assert len(line) < 200
