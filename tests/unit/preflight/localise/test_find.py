"""Localisation on a simulated cluster: the right culprit, in few rounds, never guessed.

The simulation plays the cluster's transport: a group's value is what an all-reduce
(or a TCP test) over those nodes would measure, a little lower for larger groups,
halved by a slow node or by both ends of a slow link in the group, with seeded noise.
Every round it is asked for is checked for groups that share a node.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from toolkit.preflight.localise.find import (
    Failed,
    Localisation,
    LocaliseOptions,
    ProbeResult,
    Verdict,
    localise,
)

HEALTHY_GB_S = 100.0
SLOW = 0.5
FLOOR = Verdict(floor=60.0, fraction=0.8)  # an absolute floor and a relative limit
RELATIVE = Verdict(floor=None, fraction=0.8)  # only against the other groups
ABSOLUTE = Verdict(floor=60.0, fraction=None)
# 1 bad node: rounds_used <= C * log2(N) + D (the whole, the splits, one conviction round)
C, D = 1.0, 3.0
# 1 bad link: two rounds a level once the split separates its ends, then a confirmation
LINK_C, LINK_D = 2.0, 5.0


def names(n: int) -> list[str]:
    return [f"node{i:04d}" for i in range(n)]


@dataclass
class SimCluster:
    """Groups are slow when they hold a slow node or both ends of a slow link."""

    nodes: Sequence[str]
    slow: set[str] = field(default_factory=set)
    links: set[frozenset[str]] = field(default_factory=set)
    dead: set[str] = field(default_factory=set)  # any test with it fails
    flaky_at: dict[str, set[int]] = field(default_factory=dict)  # node -> its slow tests (1-based)
    uniform: float = 1.0  # every group scaled: the whole cluster slow
    noise: float = 0.0
    seed: int = 0
    rounds: list[list[tuple[str, ...]]] = field(default_factory=list)
    tests_of: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.known = frozenset(self.nodes)

    def probe(self, groups: Sequence[tuple[str, ...]]) -> list[ProbeResult]:
        members = [n for g in groups for n in g]
        assert len(members) == len(set(members)), f"a round shares a node: {groups}"
        assert self.known.issuperset(members)
        assert all(len(g) >= 2 for g in groups), f"a group of one node: {groups}"
        self.rounds.append(list(groups))
        return [self.measure(set(g)) for g in groups]

    def measure(self, group: set[str]) -> ProbeResult:
        if group & self.dead:
            return Failed("NCCL error: remote process exited")
        value = HEALTHY_GB_S * (1 - 0.02 * math.log2(len(group))) * self.uniform
        if group & self.slow:
            value *= SLOW
        if any(link <= group for link in self.links):
            value *= SLOW
        for node in group.intersection(self.flaky_at):
            self.tests_of[node] = self.tests_of.get(node, 0) + 1
            if self.tests_of[node] in self.flaky_at[node]:
                value *= SLOW
        return value * self.rng.uniform(1 - self.noise, 1 + self.noise)


def run(cluster: SimCluster, verdict: Verdict = FLOOR, **options: object) -> Localisation:
    found = localise(
        cluster.nodes,
        cluster.probe,
        verdict,
        options=LocaliseOptions(**options),  # type: ignore[arg-type]
    )
    assert found.rounds_used == len(cluster.rounds)
    assert found.probes_run == sum(len(r) for r in cluster.rounds)
    return found


def blamed(found: Localisation) -> set[tuple[str, tuple[str, ...]]]:
    return {(c.kind, tuple(sorted(c.nodes))) for c in found.culprits}


@pytest.mark.parametrize("verdict", [FLOOR, RELATIVE, ABSOLUTE], ids=["floor", "relative", "abs"])
def test_one_slow_node_is_named_with_the_readings_that_convicted_it(verdict: Verdict) -> None:
    nodes = names(16)
    found = run(SimCluster(nodes, slow={"node0011"}, noise=0.03, seed=4), verdict)
    assert found.conclusion == "localised"
    assert blamed(found) == {("node", ("node0011",))}
    assert found.bad_nodes == ("node0011",)
    (culprit,) = found.culprits
    # bad at least twice (retry before blaming), each time with cleared company only
    assert len(culprit.evidence) >= 2
    assert all(r.bad and "node0011" in r.group for r in culprit.evidence)
    assert all(m in found.cleared for r in culprit.evidence for m in r.group if m != "node0011")
    assert "node0011" not in found.cleared
    assert set(found.cleared) == set(nodes) - {"node0011"}
    assert found.describe()[0].startswith("localised in")
    assert "node node0011" in found.describe()[1]


def test_two_slow_nodes_are_both_named() -> None:
    nodes = names(64)
    for pair in [("node0003", "node0040"), ("node0020", "node0021"), ("node0000", "node0063")]:
        found = run(SimCluster(nodes, slow=set(pair), noise=0.03, seed=1))
        assert found.conclusion == "localised", pair
        assert blamed(found) == {("node", (p,)) for p in pair}


def test_a_slow_link_is_named_as_a_link_and_neither_end_is_blamed() -> None:
    nodes = names(16)
    for a, b in [("node0002", "node0005"), ("node0002", "node0013"), ("node0000", "node0001")]:
        found = run(SimCluster(nodes, links={frozenset((a, b))}))
        assert found.conclusion == "localised", (a, b)
        assert blamed(found) == {("link", (a, b))}
        assert found.bad_nodes == ()
        (culprit,) = found.culprits
        pair_bad = [r for r in culprit.evidence if r.bad and set(r.group) == {a, b}]
        assert len(pair_bad) >= 2  # the pair itself, measured bad twice
        for end in (a, b):  # and each end good with someone else
            assert any(r.bad is False and end in r.group for r in culprit.evidence)


def test_all_good_names_nothing() -> None:
    nodes = names(32)
    found = run(SimCluster(nodes, noise=0.03, seed=2))
    assert found.conclusion == "healthy"
    assert found.culprits == () and found.flaky == () and found.unresolved == ()
    assert found.rounds_used == 1 and found.probes_run == 1
    assert found.describe() == [
        "nothing to localise: every group measured good (1 rounds, 1 probes)"
    ]


def test_all_good_under_a_relative_verdict_names_nothing() -> None:
    found = run(SimCluster(names(32), noise=0.03, seed=2), RELATIVE)
    assert found.culprits == ()
    assert found.bad_nodes == ()


@pytest.mark.parametrize("verdict", [FLOOR, RELATIVE, ABSOLUTE], ids=["floor", "relative", "abs"])
def test_a_uniformly_slow_cluster_is_cluster_wide_with_no_culprit(verdict: Verdict) -> None:
    nodes = names(32)
    found = run(SimCluster(nodes, uniform=SLOW, noise=0.03, seed=3), verdict)
    assert found.conclusion == "cluster-wide"
    assert found.culprits == ()
    assert {n for g in found.unresolved for n in g} == set(nodes)
    assert found.describe()[0].startswith("cluster-wide, no single culprit: 32 of 32 nodes")
    assert found.rounds_used <= 2 * math.log2(32) + D


def test_too_many_bad_nodes_are_cluster_wide_not_culprits() -> None:
    nodes = names(8)
    found = run(SimCluster(nodes, slow=set(nodes[:5])))
    assert found.conclusion == "cluster-wide"
    assert found.culprits == ()
    assert set(nodes[:5]) <= {n for g in found.unresolved for n in g}


def test_a_node_slow_only_once_is_not_blamed_but_reported_flaky() -> None:
    nodes = names(16)
    cluster = SimCluster(nodes, flaky_at={"node0006": {1}})  # its first test: the whole
    found = run(cluster)
    assert found.conclusion == "flaky"
    assert found.culprits == ()
    (flake,) = found.flaky
    assert "node0006" in flake.nodes
    assert [r.bad for r in flake.evidence] == [True, False]  # bad, then good again
    assert found.describe()[0].startswith("no culprit: the bad results did not repeat")


def test_a_flake_during_the_search_does_not_hide_a_real_culprit() -> None:
    nodes = names(16)
    # node0009 is slow in its 2nd test only (the halves' round), node0001 always
    found = run(SimCluster(nodes, slow={"node0001"}, flaky_at={"node0009": {2}}))
    assert found.conclusion == "localised"
    assert blamed(found) == {("node", ("node0001",))}
    assert any("node0009" in f.nodes for f in found.flaky)


def test_a_node_slow_for_a_while_then_fine_is_only_flaky_narrowed_to_its_pair() -> None:
    nodes = names(8)
    cluster = SimCluster(nodes, flaky_at={"node0005": {1, 2, 3}})  # whole, half, pair
    found = run(cluster)
    assert found.culprits == ()
    assert found.conclusion == "flaky"
    (flake,) = found.flaky
    assert flake.nodes == ("node0004", "node0005")
    assert [r.bad for r in flake.evidence] == [True, False]


def test_more_retries_need_more_bad_readings_before_blaming() -> None:
    nodes = names(16)
    # every group it was in (the whole, a half, a quarter, its pair, itself with a
    # known-good partner) implicates it once the others are cleared: 5 bad readings
    once = run(SimCluster(nodes, slow={"node0007"}), retries=1)
    many = run(SimCluster(nodes, slow={"node0007"}), retries=5)
    assert blamed(once) == blamed(many) == {("node", ("node0007",))}
    assert len(once.culprits[0].evidence) == 5
    assert len(many.culprits[0].evidence) == 6
    assert [r.role for r in many.culprits[0].evidence].count("single") == 2
    assert many.rounds_used == once.rounds_used + 1


def test_a_failing_node_is_named_with_the_error_in_its_evidence() -> None:
    nodes = names(12)
    found = run(SimCluster(nodes, dead={"node0004"}))
    assert blamed(found) == {("node", ("node0004",))}
    assert all(r.value is None and "NCCL" in r.error for r in found.culprits[0].evidence)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16, 100, 1024])
def test_one_bad_node_at_every_position_is_named_within_log_rounds(n: int) -> None:
    nodes = names(n)
    for position, node in enumerate(nodes):
        found = run(SimCluster(nodes, slow={node}))
        if n == 2:  # no third node: no known-good partner to tell which one
            assert found.conclusion == "cluster-wide" and found.culprits == ()
        else:
            assert blamed(found) == {("node", (node,))}, (n, position)
            assert found.conclusion == "localised"
        assert found.rounds_used <= C * math.log2(n) + D, (n, position, found.rounds_used)
        assert found.probes_run <= 4 * math.log2(n) + 6, (n, position, found.probes_run)


@pytest.mark.parametrize("n", [3, 5, 8, 16, 100])
def test_a_bad_link_anywhere_is_named_within_log_rounds(n: int) -> None:
    nodes = names(n)
    pairs = [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1 :]]
    if len(pairs) > 300:
        pairs = random.Random(n).sample(pairs, 300)
    for a, b in pairs:
        found = run(SimCluster(nodes, links={frozenset((a, b))}))
        assert blamed(found) == {("link", (a, b))}, (n, a, b)
        assert found.rounds_used <= LINK_C * math.log2(n) + LINK_D, (n, a, b)


def test_k_bad_nodes_cost_about_k_log_n_probes_and_log_n_rounds() -> None:
    nodes = names(1024)
    for k in (1, 2, 4, 8, 16):
        for seed in range(3):
            slow = set(random.Random(seed).sample(nodes, k))
            found = run(SimCluster(nodes, slow=slow, noise=0.03, seed=seed))
            assert {n for _, (n,) in blamed(found)} == slow
            assert found.probes_run <= k * (2 * math.log2(1024) + 4) + 2 * math.log2(1024)
            assert found.rounds_used <= math.log2(1024) + D + 1


def test_a_wider_fanout_takes_fewer_rounds_and_more_probes() -> None:
    nodes = names(1024)
    halving = run(SimCluster(nodes, slow={"node0700"}))
    wide = run(SimCluster(nodes, slow={"node0700"}), fanout=1024)
    assert blamed(halving) == blamed(wide) == {("node", ("node0700",))}
    assert wide.rounds_used <= 3 < halving.rounds_used
    assert wide.probes_run > 10 * halving.probes_run
    quarters = run(SimCluster(nodes, slow={"node0700"}), fanout=4)
    assert quarters.rounds_used < halving.rounds_used


def test_a_seed_shuffles_the_splits_deterministically() -> None:
    nodes = names(64)

    def once(seed: int | None) -> Localisation:
        return run(SimCluster(nodes, slow={"node0033"}), seed=seed)

    first, again, other, plain = once(7), once(7), once(8), once(None)
    assert first.readings == again.readings
    assert first.readings != other.readings
    assert plain.readings[1].group == tuple(nodes[:32])  # no seed: the given order's halves
    assert {frozenset(blamed(r)) for r in (first, other, plain)} == {
        frozenset({("node", ("node0033",))})
    }


def test_seconds_where_lower_is_better() -> None:
    nodes = names(16)
    cluster = SimCluster(nodes, slow={"node0012"})

    def seconds(groups: Sequence[tuple[str, ...]]) -> list[ProbeResult]:
        return [100.0 / v if isinstance(v, float) else v for v in cluster.probe(groups)]

    verdict = Verdict(floor=1.6, fraction=0.8, higher_is_better=False)
    found = localise(nodes, seconds, verdict)
    assert blamed(found) == {("node", ("node0012",))}


def test_a_tcp_ring_already_measured_convicts_a_slow_node_without_a_round() -> None:
    nodes = names(8)
    cluster = SimCluster(nodes, slow={"node0003"})
    ring = [(nodes[i], nodes[(i + 1) % 8]) for i in range(8)]
    measured = [(pair, cluster.measure(set(pair))) for pair in ring]
    found = localise(nodes, cluster.probe, Verdict(floor=None, fraction=0.7), measured)
    assert blamed(found) == {("node", ("node0003",))}
    assert found.rounds_used == 0
    assert {r.group for r in found.culprits[0].evidence} == {ring[2], ring[3]}


def test_a_tcp_ring_with_one_bad_link_confirms_the_link_in_one_round() -> None:
    nodes = names(8)
    cluster = SimCluster(nodes, links={frozenset(("node0004", "node0005"))})
    ring = [(nodes[i], nodes[(i + 1) % 8]) for i in range(8)]
    measured = [(pair, cluster.measure(set(pair))) for pair in ring]
    found = localise(nodes, cluster.probe, Verdict(floor=None, fraction=0.7), measured)
    assert blamed(found) == {("link", ("node0004", "node0005"))}
    assert found.rounds_used == 1


def test_ray_port_reachability_names_a_blocked_node_then_without_it_a_blocked_link() -> None:
    nodes = names(10)
    blocked_node = "node0006"
    blocked_link = frozenset(("node0001", "node0008"))

    def reach(groups: Sequence[tuple[str, ...]]) -> list[ProbeResult]:
        # every node of a group reaches every other's Ray ports, or the group fails
        return [blocked_node not in g and not blocked_link <= set(g) for g in groups]

    found = localise(nodes, reach, Verdict.pass_fail())
    # the node explains every failed group; the link hides behind it until it is out
    assert blamed(found) == {("node", (blocked_node,))}
    assert found.rounds_used <= C * math.log2(10) + D
    rest = [n for n in nodes if n not in found.bad_nodes]
    again = localise(rest, reach, Verdict.pass_fail())
    assert blamed(again) == {("link", ("node0001", "node0008"))}
    assert again.rounds_used <= LINK_C * math.log2(9) + LINK_D


def test_the_callers_good_whole_is_healthy_without_a_round() -> None:
    nodes = names(4)
    found = localise(nodes, SimCluster(nodes).probe, FLOOR, [(tuple(nodes), 95.0)])
    assert found.conclusion == "healthy" and found.rounds_used == 0


def test_bad_inputs_are_refused() -> None:
    cluster = SimCluster(names(4))
    with pytest.raises(ValueError, match="2 or more distinct nodes"):
        localise(["a"], cluster.probe, FLOOR)
    with pytest.raises(ValueError, match="2 or more distinct nodes"):
        localise(["a", "a"], cluster.probe, FLOOR)
    with pytest.raises(ValueError, match="names nodes not in"):
        localise(names(4), cluster.probe, FLOOR, [(("node0000", "elsewhere"), 1.0)])
    with pytest.raises(ValueError, match="answered 0 results for 1 groups"):
        localise(names(4), lambda groups: [], FLOOR)
    with pytest.raises(ValueError, match=r"fraction must be in \(0, 1\], got 1.5"):
        Verdict(fraction=1.5)
    with pytest.raises(ValueError, match="fanout must be >= 2, got 1"):
        LocaliseOptions(fanout=1)


def test_a_relative_verdict_on_three_nodes_cannot_tell_and_says_so() -> None:
    nodes = names(3)
    found = run(SimCluster(nodes, slow={"node0001"}), RELATIVE)
    assert found.culprits == ()  # one group of two alone: nothing to compare it with
    assert found.conclusion == "cluster-wide"
    assert "measured alike" in found.describe()[0]


def test_a_relative_verdict_given_a_slow_whole_finds_one_bad_node_in_each_half() -> None:
    nodes = names(32)
    cluster = SimCluster(nodes, slow={"node0003", "node0020"}, noise=0.03, seed=5)
    found = localise(nodes, cluster.probe, RELATIVE, [(tuple(nodes), 50.0)])
    assert blamed(found) == {("node", ("node0003",)), ("node", ("node0020",))}
    first = found.by_round()[1]
    assert len([r for r in first if r.role == "part"]) == 4  # quarters, not halves


def test_a_wider_fanout_finds_a_link_across_its_parts() -> None:
    nodes = names(12)
    for a, b in [("node0000", "node0011"), ("node0002", "node0006"), ("node0004", "node0005")]:
        found = run(SimCluster(nodes, links={frozenset((a, b))}), fanout=3)
        assert blamed(found) == {("link", (a, b))}, (a, b)


def test_the_description_fits_a_screen_at_a_thousand_nodes() -> None:
    nodes = names(1024)
    found = run(SimCluster(nodes, slow={"node0100"}, flaky_at={"node0900": {2}}))
    lines = found.describe()
    assert lines[0] == f"localised in {found.rounds_used} rounds, {found.probes_run} probes"
    assert lines[1] == "  node node0100: bad in 11 tests"
    assert lines[2].startswith("  flaky (bad once, then good) node0512,node0513,")
    assert lines[2].endswith("and 506 more")
    assert len(lines) == 3 and all(len(line) < 120 for line in lines)
