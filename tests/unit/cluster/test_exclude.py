"""``--exclude`` and ``--exclude-file``: what they ask for, checked against the inventory.

Real files in a temporary directory: text lists, ``rtk preflight --json`` output (made
by ``PreflightReport`` from checks), ``rtk up --json`` output, and malformed ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from toolkit.cluster.exclude import (
    ExcludeError,
    asked_exclusions,
    excluded_from_state,
    inventory_without,
    read_exclude_file,
)
from toolkit.cluster.plan import build_plan
from toolkit.cluster.plan_text import render_up
from toolkit.inventory import Inventory, load_inventory
from toolkit.preflight.result import PreflightReport
from toolkit.rundir.preflight import Check, Exclusion
from toolkit.state.cluster_state import ClusterState

NODES = [f"node{i}" for i in range(1, 7)]  # node1 is the head


def inventory(tmp_path: Path, min_nodes: int | None = 4, head: str | None = None) -> Inventory:
    data: dict[str, object] = {
        "cluster": "six",
        "nodes": [{"host": n, "address": f"10.0.0.{i}"} for i, n in enumerate(NODES, start=1)],
        "ray": {"auth": "none"},
    }
    if min_nodes is not None:
        data["min_nodes"] = min_nodes
    if head is not None:
        data["head"] = head
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_inventory(path)


def test_names_and_ranges_expand_and_merge_once_per_node() -> None:
    found = asked_exclusions(["node[3-4]", "node6", "node4"])
    assert found == [
        Exclusion("node3", ("--exclude",)),
        Exclusion("node4", ("--exclude",)),
        Exclusion("node6", ("--exclude",)),
    ]


def test_a_malformed_range_is_an_error_naming_it() -> None:
    with pytest.raises(ExcludeError, match=r"--exclude: 'node\[4-2\]': range '4-2' runs backwards"):
        asked_exclusions(["node[4-2]"])
    assert ExcludeError.exit_code == 2


def test_a_text_file_has_one_name_or_range_per_line_with_comments(tmp_path: Path) -> None:
    path = tmp_path / "bad-nodes.txt"
    path.write_text("# found on Monday\nnode2   # slow link\n\n  node[5-6]\n")
    assert read_exclude_file(path) == [
        Exclusion("node2", (f"listed in {path}:2",)),
        Exclusion("node5", (f"listed in {path}:4",)),
        Exclusion("node6", (f"listed in {path}:4",)),
    ]
    path.write_text("node2 node3\n")
    with pytest.raises(ExcludeError, match=rf"{path}:1: 'node2 node3': .*whitespace"):
        read_exclude_file(path)


def test_a_preflight_json_gives_its_exclude_list_with_the_reasons(tmp_path: Path) -> None:
    checks = [
        Check("host.dev_shm", "node1", "pass", "64 GiB"),
        Check("host.dev_shm", "node3", "fail", "64 MiB"),
        Check("gpu.count", "node5", "fail", "7 GPUs"),
    ]
    path = tmp_path / "preflight.json"
    path.write_text(json.dumps(PreflightReport("six", checks, head="node1").to_json()))
    assert read_exclude_file(path) == [
        Exclusion("node3", ("host.dev_shm: 64 MiB",)),
        Exclusion("node5", ("gpu.count: 7 GPUs",)),
    ]
    # rtk up --json nests the preflight's record.
    nested = tmp_path / "up.json"
    nested.write_text(json.dumps({"cluster": "six", "preflight": json.loads(path.read_text())}))
    assert read_exclude_file(nested) == read_exclude_file(path)
    # Both files at once, and a name: one exclusion per node, every reason.
    both = asked_exclusions(["node3"], [path, nested])
    assert both[0] == Exclusion("node3", ("--exclude", "host.dev_shm: 64 MiB"))
    assert [e.node for e in both] == ["node3", "node5"]


def test_a_json_file_without_an_exclude_list_or_with_a_bad_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"cluster": "six", "checks": []}))
    with pytest.raises(ExcludeError, match="must have an 'exclude' list"):
        read_exclude_file(path)
    path.write_text('{"exclude": [{"node": 3}]}')
    with pytest.raises(ExcludeError, match=r"exclude\[0\]: node: expected text, got 3"):
        read_exclude_file(path)
    path.write_text('{"exclude": [')
    with pytest.raises(ExcludeError, match="not valid JSON"):
        read_exclude_file(path)
    with pytest.raises(ExcludeError, match="unreadable"):
        read_exclude_file(tmp_path / "missing.txt")


def test_the_nodes_left_make_the_inventory(tmp_path: Path) -> None:
    inv = inventory(tmp_path)
    left = inventory_without(inv, asked_exclusions(["node[3-4]"]))
    assert [n.name for n in left.nodes] == ["node1", "node2", "node5", "node6"]
    assert (left.head_name, left.min_nodes, left.name) == ("node1", 4, "six")
    assert inventory_without(inv, []) is inv


def test_unknown_names_are_named_with_the_inventorys_nodes(tmp_path: Path) -> None:
    inv = inventory(tmp_path)
    with pytest.raises(ExcludeError) as caught:
        inventory_without(inv, asked_exclusions(["node[6-8]", "gpu01"]))
    assert str(caught.value) == (
        f"cannot exclude node7-node8, gpu01: not in the inventory {inv.source}, "
        "whose nodes are node1-node6"
    )


def test_the_head_cannot_be_excluded_the_inventory_must_name_another(tmp_path: Path) -> None:
    inv = inventory(tmp_path, head="node2")
    with pytest.raises(ExcludeError, match="cannot exclude node2: it is the head") as caught:
        inventory_without(inv, asked_exclusions(["node2", "node5"]))
    assert "name another node as head in the inventory" in str(caught.value)
    # Marked as the head in a preflight JSON, it is refused the same way.
    path = tmp_path / "pf.json"
    path.write_text(json.dumps({"exclude": [{"node": "node2", "reasons": [], "head": True}]}))
    with pytest.raises(ExcludeError, match="it is the head"):
        inventory_without(inv, read_exclude_file(path))


def test_fewer_than_min_nodes_left_is_refused_naming_both_counts(tmp_path: Path) -> None:
    inv = inventory(tmp_path, min_nodes=4)
    inventory_without(inv, asked_exclusions(["node[5-6]"]))  # 4 left: fine
    with pytest.raises(ExcludeError) as caught:
        inventory_without(inv, asked_exclusions(["node[4-6]"]))
    assert str(caught.value) == (
        "excluding node4-node6 leaves 3 of 6 node(s), fewer than min_nodes 4; "
        f"lower min_nodes in {inv.source} to go on with 3"
    )
    # Without min_nodes every node is needed: no node can be left out.
    with pytest.raises(ExcludeError, match="fewer than min_nodes 6"):
        inventory_without(inventory(tmp_path, min_nodes=None), asked_exclusions(["node6"]))


def test_the_plan_brings_up_the_rest_and_says_what_it_left_out(tmp_path: Path) -> None:
    excluded = [Exclusion("node3", ("host.dev_shm: 64 MiB",))]
    plan = build_plan(inventory(tmp_path), excluded)
    assert [n.name for n in plan.nodes] == ["node1", "node2", "node4", "node5", "node6"]
    assert plan.excluded == tuple(excluded)
    text = render_up(plan)
    assert "  excluded   node3 (host.dev_shm: 64 MiB)\n" in text
    assert "[node3]" not in text
    assert "transport  ssh, 5 node(s), head node1" in text
    assert "excluded" not in render_up(build_plan(inventory(tmp_path)))


def test_the_state_gives_back_the_excluded_workers_still_in_the_inventory(
    tmp_path: Path,
) -> None:
    inv = inventory(tmp_path)
    state = ClusterState.from_json(
        {
            "excluded": [
                {"node": "node3", "reasons": ["--exclude"], "head": True},
                {"node": "node1", "reasons": ["now the head"]},
                {"node": "gone9", "reasons": ["no longer in the inventory"]},
                {"node": 7},
            ]
        }
    )
    assert excluded_from_state(state, inv) == [Exclusion("node3", ("--exclude",))]
    # written before exclusions
    assert excluded_from_state(ClusterState.from_json({"nodes": NODES}), inv) == []
    assert excluded_from_state(None, inv) == []
