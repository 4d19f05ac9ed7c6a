"""``--dry-run`` at any N: nodes sharing one plan fall into one block, headed by a host list.

Inventories of up to 1,024 nodes are written to a temporary directory and planned for
real; the grouping's own rules (masking, placeholders, losslessness) are checked on
hand-made rendered nodes. One test runs ``rtk up --dry-run`` as a user would.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import rtk

from toolkit.cluster.plan import build_plan
from toolkit.cluster.plan_summary import ADDRESS, NAME, SSH_PORT, RenderedNode, Token, group_nodes
from toolkit.cluster.plan_text import (
    MAX_EXCLUDED_LINES,
    render_down_summary,
    render_up,
    render_up_summary,
)
from toolkit.inventory import Inventory, load_inventory
from toolkit.rundir.preflight import Exclusion

BLOCK = re.compile(r"^block (\d+): (.*)$", re.M)


def write_inventory(
    tmp_path: Path, count: int, nodes: list[dict[str, Any]] | None = None, **extra: Any
) -> Path:
    """``count`` alike GPU nodes ``node0001``... over SSH (or ``nodes`` as given)."""
    # 256 addresses a block: 10.1.0.0-10.1.3.255 for 1,024 nodes.
    blocks = f"[0-{(count - 1) // 256}]" if count > 256 else "0"
    last = 255 if count > 256 else count - 1
    alike = {"host": f"node[0001-{count:04d}]", "address": f"10.1.{blocks}.[0-{last}]", "gpus": 8}
    data: dict[str, Any] = {
        "cluster": "big",
        "head": "node0001",
        "defaults": {"ssh": {"user": "train"}, "venv": "/opt/venvs/rtk"},
        "nodes": nodes or [alike],
        **extra,
    }
    path = tmp_path / f"inv-{count}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def plan_of(path: Path, excluded: tuple[Exclusion, ...] = ()) -> Any:
    inv: Inventory = load_inventory(path)
    return build_plan(inv, excluded)


def headings(text: str) -> list[str]:
    return [m.group(2) for m in BLOCK.finditer(text)]


def lines_per_node(path: Path) -> int:
    """How many lines one worker takes in the full plan (its section, blank line included)."""
    full = render_up(plan_of(path)).splitlines()
    first = full.index(next(line for line in full if line.startswith("[node0002]")))
    return full.index("", first) - first + 1


# --- at 1,024 nodes --------------------------------------------------------------------


def test_1024_alike_nodes_are_two_blocks_on_about_a_screen(tmp_path: Path) -> None:
    big = write_inventory(tmp_path, 1024)
    text = render_up_summary(plan_of(big))
    assert headings(text) == [
        "head node0001",
        "1,023 workers node[0002-1024]; <name>, <address>: each node's own",
    ]
    # ~40 lines of its own, plus the two blocks' commands; the same as at 4 nodes.
    per_node = lines_per_node(big)
    lines = text.splitlines()
    assert len(lines) <= 40 + 2 * per_node
    assert len(lines) == len(render_up_summary(plan_of(write_inventory(tmp_path, 4))).splitlines())
    assert lines[-1] == "total: 1,024 node(s) (1 head, 1,023 worker(s)) in 2 block(s); " + (
        "--full shows every node"
    )
    # The full plan has them all: about 25 lines a node.
    assert len(render_up(plan_of(big)).splitlines()) > 1024 * (per_node - 1)


def test_the_worker_block_shows_placeholders_only_where_nodes_differ(tmp_path: Path) -> None:
    text = render_up_summary(plan_of(write_inventory(tmp_path, 1024)))
    head, workers = text.split("\nblock 2: ")
    assert "[node0001] head at 10.1.0.0" in head and "<name>" not in head
    assert "<address>" not in head
    assert "\n[<name>] worker at <address>, 8 GPU(s) expected" in workers
    assert "  reach: ssh -p 22 train@<address>\n" in workers  # one port: shown as it is
    assert "RTK_NODE=<name>\n" in workers
    assert '\'--resources={"rtk_host:<name>": 1.0, "rtk_node": 1.0}\'' in workers
    # The head's address is everyone's, not a worker's own: it stays.
    assert "probe 10.1.0.0 /tmp/rtk-big 6380" in workers
    assert "node0002" not in workers and "10.1.0.1 " not in workers


def test_the_head_is_its_own_block_wherever_it_stands(tmp_path: Path) -> None:
    path = write_inventory(tmp_path, 1024, head="node0512")
    text = render_up_summary(plan_of(path))
    assert headings(text) == [
        "head node0512",
        "1,023 workers node[0001-0511,0513-1024]; <name>, <address>: each node's own",
    ]
    assert text.index("workers start in parallel once the head is up") > text.index("block 1")
    assert text.index("workers start in parallel") < text.index("block 2")


# --- what splits a block ---------------------------------------------------------------


def test_another_python_or_ssh_user_is_another_block(tmp_path: Path) -> None:
    nodes = [
        {"host": "node[0001-0400]", "address": "10.1.[0-1].[0-199]", "gpus": 8},
        {"host": "node[0401-0700]", "address": "10.2.[0-2].[0-99]", "gpus": 8,
         "python": "/opt/other/bin/python3"},
        {"host": "node[0701-1024]", "address": "10.3.[0-3].[0-80]", "gpus": 8,
         "ssh": {"user": "ops"}},
    ]  # fmt: skip
    text = render_up_summary(plan_of(write_inventory(tmp_path, 1024, nodes=nodes)))
    own = "; <name>, <address>: each node's own"
    assert headings(text) == [
        "head node0001",
        f"399 workers node[0002-0400]{own}",
        f"300 workers node[0401-0700]{own}",
        f"324 workers node[0701-1024]{own}",
    ]
    _, head, alike, python, user = text.split("\nblock ")
    assert "exec /opt/other/bin/python3 -m ray.scripts.scripts start" in python
    assert "/opt/other/bin/python3" not in head + alike + user
    assert "reach: ssh -p 22 ops@<address>" in user
    assert "reach: ssh -p 22 train@<address>" in alike and "train@" in python


def test_nodes_on_their_own_ssh_ports_share_a_block(tmp_path: Path) -> None:
    nodes = [
        {"host": f"node{i:04d}", "address": f"gw{i}.site", "ssh": {"port": 2200 + i}}
        for i in range(1, 6)
    ]
    text = render_up_summary(plan_of(write_inventory(tmp_path, 5, nodes=nodes)))
    assert headings(text) == [
        "head node0001",
        "4 workers node[0002-0005]; <name>, <address>, <ssh port>: each node's own",
    ]
    assert "reach: ssh -p <ssh port> train@<address>" in text
    assert "reach: ssh -p 2201 train@gw1.site" in text  # the head's own block


def test_other_gpus_or_env_is_another_block(tmp_path: Path) -> None:
    nodes = [
        {"host": "node[0001-0010]", "address": "10.0.0.[1-10]", "gpus": 8},
        {"host": "node0011", "address": "10.0.0.11", "gpus": 4},
        {"host": "node[0012-0013]", "address": "10.0.0.[12-13]", "gpus": 8,
         "env": {"NCCL_DEBUG": "INFO"}},
    ]  # fmt: skip
    text = render_up_summary(plan_of(write_inventory(tmp_path, 13, nodes=nodes)))
    assert [h.split(";")[0] for h in headings(text)] == [
        "head node0001",
        "9 workers node[0002-0010]",
        "worker node0011",
        "2 workers node[0012-0013]",
    ]
    assert "[node0011] worker at 10.0.0.11, 4 GPU(s) expected" in text


# --- excluded nodes --------------------------------------------------------------------


def test_excluded_nodes_are_listed_by_reason(tmp_path: Path) -> None:
    path = write_inventory(tmp_path, 1024, min_nodes=900)
    asked = tuple(Exclusion(f"node{i:04d}", ("--exclude",)) for i in (5, 6, 7, 100))
    slow = (Exclusion("node0200", ("net.bandwidth: 0.8 Gbit/s",)),)
    text = render_up_summary(plan_of(path, asked + slow))
    lines = text.splitlines()
    assert "  excluded   node[0005-0007,0100] (4 nodes: --exclude)" in lines
    assert "  excluded   node0200 (net.bandwidth: 0.8 Gbit/s)" in lines
    assert lines[-1].startswith("total: 1,019 node(s) (1 head, 1,018 worker(s)) in 2 block(s)")
    assert ", 5 excluded;" in lines[-1]
    assert "1,018 workers node[0002-0004,0008-0099,0101-0199,0201-1024]" in text


def test_many_reasons_to_exclude_are_cut_to_a_few_lines(tmp_path: Path) -> None:
    path = write_inventory(tmp_path, 1024, min_nodes=900)
    excluded = tuple(
        Exclusion(f"node{i:04d}", (f"net.bandwidth: {i / 100:.2f} Gbit/s",)) for i in range(2, 52)
    )
    text = render_up_summary(plan_of(path, excluded))
    listed = [line for line in text.splitlines() if line.startswith("  excluded ")]
    assert len(listed) == MAX_EXCLUDED_LINES + 1
    assert listed[0] == "  excluded   node0002 (net.bandwidth: 0.02 Gbit/s)"
    assert listed[-1] == (
        f"  excluded   {50 - MAX_EXCLUDED_LINES} more node(s) for other reasons; --full lists each"
    )


# --- rtk down --------------------------------------------------------------------------


def test_down_is_one_line_for_alike_nodes(tmp_path: Path) -> None:
    text = render_down_summary(plan_of(write_inventory(tmp_path, 1024)))
    lines = text.splitlines()
    assert len(lines) == 4
    assert lines[2] == (
        "  [node[0001-1024]] (1,024 nodes) /opt/venvs/rtk/bin/python - stop /tmp/rtk-big 8  "
        "(rtk node agent on stdin)"
    )


# --- the grouping itself ---------------------------------------------------------------


def rendered(name: str, address: str, *lines: str, port: int = 22) -> RenderedNode:
    tokens = (Token(NAME, name), Token(ADDRESS, address), Token(SSH_PORT, str(port), "-p "))
    return RenderedNode(name, "worker", lines, tokens)


def test_masking_takes_whole_values_only_and_gives_each_node_back() -> None:
    nodes = [
        rendered(
            f"n{i}",
            f"10.0.0.{i}",
            f"[n{i}] at 10.0.0.{i}, head 10.0.0.11",
            f"ssh -p {port} u@10.0.0.{i}; timeout 22; cp /var/n{i}/x n1x n1.site",
            port=port,
        )
        for i, port in ((1, 22), (2, 2202), (3, 2203))
    ]
    (block,) = group_nodes(nodes)
    assert block.nodes == ("n1", "n2", "n3")
    assert block.varying == (NAME, ADDRESS, SSH_PORT)
    # 10.0.0.1 inside 10.0.0.11, n1 inside n1x or n1.site, 22 not after "-p ": all stay.
    assert block.lines == (
        "[<name>] at <address>, head 10.0.0.11",
        "ssh -p <ssh port> u@<address>; timeout 22; cp /var/<name>/x n1x n1.site",
    )
    for node in nodes:
        assert block.lines_for(node.name) == node.lines


def test_values_every_node_shares_are_shown_as_they_are() -> None:
    nodes = [rendered(f"gpu{i}", "127.0.0.1", f"[gpu{i}] at 127.0.0.1") for i in (1, 2)]
    (block,) = group_nodes(nodes)
    assert block.lines == ("[<name>] at 127.0.0.1",)
    assert block.varying == (NAME,)
    assert group_nodes(nodes[:1])[0].lines == ("[gpu1] at 127.0.0.1",)


def test_a_name_that_is_its_address_reads_as_the_name() -> None:
    nodes = [rendered(h, h, f"[{h}] at {h}", f"ssh {h}") for h in ("gpu01.site", "gpu02.site")]
    (block,) = group_nodes(nodes)
    assert block.lines == ("[<name>] at <name>", "ssh <name>")
    assert block.lines_for("gpu02.site") == nodes[1].lines


def test_text_that_spells_a_placeholder_is_never_masked() -> None:
    odd = rendered("n2", "10.0.0.2", "[n2] at 10.0.0.2 echo '<name>'")
    nodes = [rendered("n1", "10.0.0.1", "[n1] at 10.0.0.1 echo 'x'"), odd]
    blocks = group_nodes(nodes)
    assert [b.nodes for b in blocks] == [("n1",), ("n2",)]
    assert blocks[1].lines_for("n2") == odd.lines


def test_roles_never_share_a_block() -> None:
    head = RenderedNode("n1", "head", ("[<x>]",), ())
    worker = RenderedNode("n2", "worker", ("[<x>]",), ())
    assert [b.role for b in group_nodes([head, worker])] == ["head", "worker"]


def test_a_long_scattered_host_list_is_cut(tmp_path: Path) -> None:
    nodes = [rendered(f"node{i:04d}", f"10.0.{i // 256}.{i % 256}", "x") for i in range(1, 600, 2)]
    (block,) = group_nodes(nodes)
    hosts = block.hostlist()
    assert hosts.startswith("node[0001,0003,0005,") and hosts.endswith(",...")
    assert len(hosts) <= 124


# --- the CLI, as a user runs it --------------------------------------------------------


def test_cli_dry_run_summarises_and_full_prints_every_node(tmp_path: Path, state_dir: Path) -> None:
    path = write_inventory(tmp_path, 1024, min_nodes=1000)
    done = rtk("up", str(path), "--dry-run", "--exclude", "node[1000-1002]")
    assert done.returncode == 0, done.stderr
    assert headings(done.stdout)[1].startswith("1,020 workers node[0002-0999,1003-1024];")
    assert "  excluded   node[1000-1002] (3 nodes: --exclude)" in done.stdout
    assert len(done.stdout.splitlines()) <= 40 + 2 * lines_per_node(path)

    full = rtk("up", str(path), "--dry-run", "--full")
    assert full.returncode == 0, full.stderr
    named = re.findall(r"^\[(node\d{4})\] (?:head|worker) at ", full.stdout, re.M)
    assert named == [f"node{i:04d}" for i in range(1, 1025)]
    # --json asks for everything: every node too.
    as_json = rtk("up", str(path), "--dry-run", "--json")
    assert as_json.stdout == full.stdout

    down = rtk("down", str(path), "--dry-run")
    assert down.returncode == 0, down.stderr
    assert "[node[0001-1024]] (1,024 nodes)" in down.stdout
    down_full = rtk("down", str(path), "--dry-run", "--full")
    assert len(re.findall(r"^  \[node\d{4}\] ", down_full.stdout, re.M)) == 1024
    assert not state_dir.exists()


def test_cli_full_without_dry_run_is_a_usage_error(tmp_path: Path) -> None:
    done = rtk("up", str(write_inventory(tmp_path, 2)), "--full")
    assert done.returncode == 2
    assert "--full goes with --dry-run" in done.stderr


@pytest.mark.parametrize("command", ["up", "down"])
def test_cli_help_names_full(command: str) -> None:
    done = rtk(command, "--help")
    assert "--full" in done.stdout
