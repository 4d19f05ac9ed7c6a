"""The sandbox's inventory text: what the tests' clusters come up from."""

from __future__ import annotations

from pathlib import Path

from toolkit.inventory import Inventory
from toolkit.inventory.loader import parse_inventory
from toolkit.sandbox.config_files import inventory
from toolkit.sandbox.names import Layout

CLOCKS = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3"}


def read_back(text: str, layout: Layout, where: Path) -> Inventory:
    """``text`` parsed as rtk parses inventories, its key files made to exist in ``where``."""
    for path in (layout.key_path, layout.known_hosts):
        (where / path.name).write_text("")
        text = text.replace(str(path), str(where / path.name))
    return parse_inventory(text, "sandbox", where)


def test_the_inventory_reads_back_with_every_node_and_the_ray_environment(
    tmp_path: Path,
) -> None:
    layout = Layout.build("sbx", "10.77.99", 3)
    parsed = read_back(inventory(layout, "/usr/bin/python3", env=CLOCKS), layout, tmp_path)
    assert parsed.name == "sbx"
    assert [(n.name, n.address) for n in parsed.nodes] == [
        (n.name, n.address) for n in layout.nodes
    ]
    for node in parsed.nodes:
        assert {k: node.env[k] for k in CLOCKS} == CLOCKS  # every node's Ray gets them


def test_without_an_environment_the_nodes_have_none_of_their_own(tmp_path: Path) -> None:
    layout = Layout.build("sbx", "10.77.99", 2)
    parsed = read_back(inventory(layout, "/usr/bin/python3"), layout, tmp_path)
    assert all(not node.env for node in parsed.nodes)
