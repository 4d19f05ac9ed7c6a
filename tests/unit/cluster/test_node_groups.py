"""Failures grouped by cause: per-node text taken out, the largest group first, hostlists."""

from __future__ import annotations

from toolkit.cluster.node_groups import (
    NodeGroup,
    group_nodes,
    normalise_cause,
    render_failure_groups,
)
from toolkit.inventory import expand_hosts
from toolkit.inventory.hostrange import fit_hostlist

NAMES = [f"n{i:04d}" for i in range(1, 1025)]


def test_the_node_s_own_name_and_addresses_do_not_split_a_cause() -> None:
    assert normalise_cause("n0033", "n0033: n0033: SSH to 10.0.0.33 timed out") == (
        "SSH to <address> timed out"
    )
    assert normalise_cause("n0007", "n0007: port(s) 6379 already in use") == (
        "port(s) 6379 already in use"
    )
    # Another node's name is kept (it is the cause: the head, a peer), and a name
    # that merely starts with this one's is not this one.
    assert normalise_cause("n0001", "no route from n0001 to head n0010") == (
        "no route from <node> to head n0010"
    )
    assert normalise_cause("n001", "n0010 refused") == "n0010 refused"
    assert normalise_cause("a", "ray start exited 1:\n  raylet\tdied") == (
        "ray start exited 1: raylet died"
    )
    assert normalise_cause("a", "connect to [fe80::1:2]:22 or 192.168.1.5:6379") == (
        "connect to [<address>]:22 or <address>"
    )
    assert normalise_cause("a", "  ") == "(no reason given)"


def test_groups_come_largest_first_with_their_nodes_in_order() -> None:
    causes = [(n, f"{n}: SSH to 10.0.{i // 250}.{i % 250} timed out") for i, n in enumerate(NAMES)]
    causes[5] = ("n0006", "ray start exited 1")
    causes[900] = ("n0901", "ray start exited 1")
    causes[17] = ("n0018", "ray start exited 2")
    groups = group_nodes(causes)
    assert [(g.text, g.count) for g in groups] == [
        ("SSH to <address> timed out", 1021),
        ("ray start exited 1", 2),
        ("ray start exited 2", 1),
    ]
    assert groups[1].nodes == ("n0006", "n0901")
    assert groups[1].hostlist() == "n[0006,0901]"
    everyone = {n for g in groups for n in g.nodes}
    assert everyone == set(NAMES)
    # A node named twice counts once, with its first cause.
    again = group_nodes([("a1", "x"), ("a1", "y"), ("a2", "y")])
    assert [(g.text, g.nodes) for g in again] == [("x", ("a1",)), ("y", ("a2",))]


def test_render_names_at_most_ten_causes_then_says_how_many_more() -> None:
    causes = [(n, f"exit {i % 14}") for i, n in enumerate(NAMES[:140])]
    lines = render_failure_groups(group_nodes(causes))
    assert lines[0] == "failed: 140 node(s), 14 cause(s)"
    assert len(lines) == 1 + 10 + 1
    assert (
        lines[1] == "     10 node(s) n[0001,0015,0029,0043,0057,0071,0085,0099,0113,0127]: exit 0"
    )
    assert lines[-1] == "  and 4 more causes (--verbose / --json)"
    assert render_failure_groups([]) == []
    one = render_failure_groups([NodeGroup("boom", tuple(NAMES[:512]))], "stop failed")
    assert one == ["stop failed: 512 node(s), 1 cause(s)", "    512 node(s) n[0001-0512]: boom"]


def test_fit_hostlist_cuts_between_items_and_keeps_brackets_balanced() -> None:
    scattered = NAMES[::3]
    whole = fit_hostlist(scattered, max_chars=10_000)
    assert expand_hosts(whole) == scattered
    short = fit_hostlist(scattered, max_chars=40)
    assert len(short) <= 40 and short.endswith(",...]")
    assert short.count("[") == short.count("]") == 1
    # What is shown names real nodes: the cut part expands to a prefix of them.
    shown = expand_hosts(short.replace(",...]", "]"))
    assert shown == scattered[: len(shown)]
    mixed = fit_hostlist([*NAMES[:3], "login1", *[f"gpu{i}" for i in range(1, 40, 2)]], 30)
    assert mixed == "n[0001-0003],login1,gpu[1,...]"
