"""Who checks whose Ray ports: every pair on small clusters, a ring and random peers above."""

from __future__ import annotations

from collections import Counter

import pytest

from toolkit.preflight.peers import (
    ALL_PAIRS_MAX_NODES,
    MIN_TESTERS,
    RANDOM_PEERS,
    PeerMode,
    choose_mode,
    parse_mode,
    select_peers,
)


def names(count: int) -> list[str]:
    return [f"n{i:04d}" for i in range(1, count + 1)]


def test_every_pair_up_to_the_threshold_and_a_ring_with_random_peers_above() -> None:
    small = names(ALL_PAIRS_MAX_NODES)
    plan = select_peers(small, small, choose_mode(None, len(small)))
    assert plan.mode.label == "all"
    assert plan.pairs == len(small) * (len(small) - 1)
    assert all(set(p) == set(small) - {s} for s, p in plan.peers.items())
    big = names(ALL_PAIRS_MAX_NODES + 1)
    assert choose_mode(None, len(big)) == PeerMode(all_pairs=False, random_peers=RANDOM_PEERS)


@pytest.mark.parametrize("count", [65, 256, 1024])
def test_each_node_checks_its_ring_peer_and_is_checked_by_at_least_min_testers(
    count: int,
) -> None:
    nodes = names(count)
    plan = select_peers(nodes, nodes, PeerMode(all_pairs=False, random_peers=8), seed=7)
    for i, source in enumerate(nodes):
        peers = plan.peers[source]
        assert peers[0] == nodes[(i + 1) % count]  # the ring: the next node, the last the first
        assert source not in peers and len(set(peers)) == len(peers)
        assert len(peers) >= 9
    testers = plan.testers()
    assert set(testers) == set(nodes)  # every node is checked ...
    assert min(testers.values()) >= MIN_TESTERS  # ... by at least three
    # About 9 pairs per node: the cost does not grow with N.
    assert plan.pairs <= 9 * count + count // 10


def test_the_same_seed_draws_the_same_peers_and_another_seed_others() -> None:
    nodes = names(300)
    mode = PeerMode(all_pairs=False, random_peers=8)
    assert select_peers(nodes, nodes, mode, 1) == select_peers(nodes, nodes, mode, 1)
    assert select_peers(nodes, nodes, mode, 1).peers != select_peers(nodes, nodes, mode, 2).peers


def test_random_peers_spread_over_the_cluster() -> None:
    # A cut between the first and the last 32 nodes (two racks) is crossed by many draws.
    nodes = names(1024)
    plan = select_peers(nodes, nodes, PeerMode(all_pairs=False, random_peers=8))
    rack_a, rack_b = set(nodes[:32]), set(nodes[-32:])
    crossing = sum(1 for s in rack_a for d in plan.peers[s] if d in rack_b)
    assert crossing >= 1
    # The random peers land all over, not on a few nodes.
    drawn = Counter(d for p in plan.peers.values() for d in p[1:])
    assert len(drawn) > 0.99 * len(nodes)


def test_a_node_where_ray_is_not_up_checks_random_peers_and_is_checked_by_none() -> None:
    nodes = names(100)
    up = nodes[:90]
    plan = select_peers(nodes, up, PeerMode(all_pairs=False, random_peers=8))
    assert len(plan.peers["n0095"]) == 9 and set(plan.peers["n0095"]) <= set(up)
    assert set(plan.testers()) == set(up)
    assert plan.peers["n0090"][0] == "n0001"  # the ring closes over the nodes up


def test_ring_only_and_a_small_count_of_random_peers() -> None:
    nodes = names(100)
    ring = select_peers(nodes, nodes, PeerMode(all_pairs=False))
    assert ring.pairs == 100 and set(ring.testers().values()) == {1}
    two = select_peers(nodes, nodes, PeerMode(all_pairs=False, random_peers=1))
    assert min(two.testers().values()) >= 2
    # More peers asked than there are nodes: every pair.
    few = names(6)
    assert select_peers(few, few, PeerMode(False, 8)).mode.all_pairs


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("auto", None),
        ("all", PeerMode(all_pairs=True)),
        ("ring", PeerMode(all_pairs=False)),
        ("8", PeerMode(all_pairs=False, random_peers=8)),
        ("ring+3", PeerMode(all_pairs=False, random_peers=3)),
    ],
)
def test_the_option_reads_each_mode(text: str, mode: PeerMode | None) -> None:
    assert parse_mode(text) == mode
    if mode is not None:
        assert parse_mode(mode.label) == mode


def test_the_option_refuses_anything_else() -> None:
    with pytest.raises(ValueError, match="expected auto, all, ring or a number"):
        parse_mode("some")
