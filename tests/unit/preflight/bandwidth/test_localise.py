"""Localising a bad bandwidth result: the groups' streams, the verdicts, and the search.

A simulated network plays the nodes: a rate per direction of every pair (Gbit/s), a
node whose inbound traffic is shaped (as ``tc tbf`` on its veth's host end does in the
sandbox), optional contention when streams run at once, and seeded noise. The ring is
measured serially from it, as the job does, and localisation runs over a probe built
from the same pure parts the job's ``TcpProbe`` uses.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from toolkit.preflight.bandwidth import localise as bl
from toolkit.preflight.bandwidth.job_result import AllreduceResult, TcpPair
from toolkit.preflight.bandwidth.measure import TcpSendResult, ring_pairs
from toolkit.preflight.checks import Thresholds, slow_pairs
from toolkit.preflight.load.job_result import SweepPoint
from toolkit.preflight.localise.find import Failed, ProbeResult, localise

HEALTHY_GBIT_S = 9.8
SHAPED_GBIT_S = 0.49


def names(n: int) -> list[str]:
    return [f"node{i}" for i in range(1, n + 1)]


@dataclass
class Network:
    """Directional rates: ``slow_in`` nodes receive slowly, ``slow_out`` send slowly."""

    nodes: Sequence[str]
    slow_in: set[str] = field(default_factory=set)
    slow_out: set[str] = field(default_factory=set)
    slow_links: set[tuple[str, str]] = field(default_factory=set)  # (src, dst) one way
    dead: set[str] = field(default_factory=set)  # refuses every connection
    contention: float = 0.0  # each extra stream of a round costs this share, up to half
    noise: float = 0.03
    seed: int = 0
    rounds: list[list[tuple[str, ...]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def send(self, src: str, dst: str, streams: int = 1) -> TcpSendResult:
        if dst in self.dead or src in self.dead:
            return TcpSendResult(error="ConnectionRefusedError: [Errno 111] Connection refused")
        rate = HEALTHY_GBIT_S * max(0.5, 1 - self.contention * (streams - 1))
        if dst in self.slow_in or src in self.slow_out or (src, dst) in self.slow_links:
            rate = SHAPED_GBIT_S  # the shaper's rate, whatever else runs
        return TcpSendResult(gbit_s=rate * self.rng.uniform(1 - self.noise, 1 + self.noise))

    def ring(self, t: Thresholds, retries: int = 1) -> list[TcpPair]:
        """The job's ring: one pair at a time, slow pairs measured again, the best kept."""
        results = [TcpPair.measured(s, d, self.send(s, d)) for s, d in ring_pairs(self.nodes)]
        for _ in range(retries):
            for i, entry in enumerate(results):
                if entry.key in slow_pairs(results, t):
                    again = TcpPair.measured(entry.src, entry.dst, self.send(*entry.key))
                    if (again.gbit_s or -1.0) > (entry.gbit_s or -1.0):
                        results[i] = again
        return results

    def probe(self, groups: Sequence[tuple[str, ...]]) -> list[ProbeResult]:
        """A round as ``TcpProbe`` runs it: every group's streams at once."""
        members = [n for g in groups for n in g]
        assert len(members) == len(set(members)), f"a round shares a node: {groups}"
        assert all(len(g) >= 2 for g in groups), f"a group of one node: {groups}"
        self.rounds.append(list(groups))
        streams = bl.round_streams(groups)
        answers = [self.send(src, dst, len(streams)) for _, (src, dst) in streams]
        return bl.tcp_group_results(len(groups), streams, answers)


DEFAULT = Thresholds()


def localise_tcp(net: Network, t: Thresholds = DEFAULT) -> tuple[Any, list[TcpPair]]:
    ring = net.ring(t)
    assert slow_pairs(ring, t), "the ring should have caught something"
    verdict = bl.tcp_verdict(t, ring)
    found = localise(net.nodes, net.probe, verdict, bl.tcp_measured(ring, t), bl.OPTIONS)
    return found, ring


def blamed(found: Any) -> set[tuple[str, tuple[str, ...]]]:
    return {(c.kind, c.nodes) for c in found.culprits}


# -- the groups' streams -------------------------------------------------------------


def test_a_pair_streams_both_ways_and_a_larger_group_is_a_ring() -> None:
    assert bl.group_streams(("a", "b")) == [("a", "b"), ("b", "a")]
    assert bl.group_streams(("a", "b", "c")) == [("a", "b"), ("b", "c"), ("c", "a")]
    streams = bl.round_streams([("a", "b"), ("c", "d", "e")])
    assert [i for i, _ in streams] == [0, 0, 1, 1, 1]
    # each node sends once and receives once in a round: a node slow either way shows
    senders = [s for _, (s, _) in streams]
    receivers = [d for _, (_, d) in streams]
    assert sorted(senders) == sorted(receivers) == ["a", "b", "c", "d", "e"]


def test_a_group_is_its_slowest_stream_and_any_failure_fails_it() -> None:
    streams = bl.round_streams([("a", "b"), ("c", "d")])
    answers = [
        TcpSendResult(gbit_s=9.0),
        TcpSendResult(gbit_s=0.4),
        TcpSendResult(gbit_s=8.0),
        TcpSendResult(error="TimeoutError: x"),
    ]
    first, second = bl.tcp_group_results(2, streams, answers)
    assert first == pytest.approx(0.4)
    assert isinstance(second, Failed) and second.error == "d->c: TimeoutError: x"


def test_the_ring_starts_the_search_with_slow_pairs_and_nodes_good_both_ways() -> None:
    ring = Network(names(5), slow_in={"node2"}, noise=0.0).ring(Thresholds())
    measured = dict(bl.tcp_measured(ring, Thresholds()))
    # node2's outbound pair is good, yet node2 is not given as good: only node1->node2
    assert measured[("node1", "node2")] == pytest.approx(SHAPED_GBIT_S)
    assert set(measured) == {("node1", "node2"), ("node3",), ("node4",), ("node5",)}
    assert measured[("node4",)] == pytest.approx(HEALTHY_GBIT_S)
    failed = [TcpPair("a", "b", error="refused"), TcpPair("b", "a", gbit_s=9.0)]
    assert isinstance(dict(bl.tcp_measured(failed, Thresholds()))[("a", "b")], Failed)


def test_the_tcp_verdict_is_the_rings_rule_against_the_round_with_a_floor() -> None:
    verdict = bl.tcp_verdict(Thresholds(tcp_min_gbit_s=2.0, tcp_min_fraction=0.5))
    assert verdict.is_bad(1.9, [9.0]) and verdict.is_bad(4.4, [9.0, 9.2])
    assert verdict.is_bad(4.6, [9.0, 9.2]) is False
    relative = bl.tcp_verdict(Thresholds())  # no floor: only against the round's peers
    assert relative.floor is None and relative.is_bad(4.0, []) is None
    assert bl.tcp_verdict(Thresholds(tcp_min_fraction=0)).fraction is None
    # the ring's floor (half its median, 4.9) shared out: a pair alone is judged by it
    ring = Network(names(6), slow_in={"node2"}, noise=0.0).ring(Thresholds())
    anchored = bl.tcp_verdict(Thresholds(), ring)
    assert anchored.floor == pytest.approx(bl.RING_SHARE * 0.5 * HEALTHY_GBIT_S)
    assert anchored.is_bad(SHAPED_GBIT_S, []) and anchored.is_bad(2.0, []) is False


# -- localising TCP on a simulated network -------------------------------------------


@pytest.mark.parametrize("count", [4, 5, 6, 16, 64])
def test_a_node_slow_inbound_is_named_not_the_link_before_it(count: int) -> None:
    nodes = names(count)
    for seed, culprit in enumerate([nodes[1], nodes[-1], nodes[count // 2]]):
        net = Network(nodes, slow_in={culprit}, seed=seed)
        found, ring = localise_tcp(net)
        before = nodes[nodes.index(culprit) - 1]
        assert slow_pairs(ring, Thresholds()) == {(before, culprit)}  # one pair in the ring
        assert found.conclusion == "localised", found.describe()
        assert blamed(found) == {("node", (culprit,))}
        assert found.rounds_used <= 3
        assert all(len(g) == 2 for r in net.rounds for g in r)  # pairs, run in parallel


def test_contention_between_parallel_pairs_does_not_blame_healthy_nodes() -> None:
    nodes = names(32)
    net = Network(nodes, slow_in={"node7"}, contention=0.05, seed=3)  # 4 streams: -15%
    found, _ = localise_tcp(net)
    assert blamed(found) == {("node", ("node7",))}
    assert set(found.cleared) == set(nodes) - {"node7"}


def test_a_node_slow_outbound_and_a_dead_node_are_named() -> None:
    nodes = names(8)
    found, _ = localise_tcp(Network(nodes, slow_out={"node5"}, seed=1))
    assert blamed(found) == {("node", ("node5",))}
    found, _ = localise_tcp(Network(nodes, dead={"node3"}, seed=2))
    assert blamed(found) == {("node", ("node3",))}


def test_in_a_small_cluster_a_pair_without_peers_is_judged_by_the_rings_floor() -> None:
    """4 nodes, one refusing: the partners run out, and a lone good pair still clears."""
    net = Network(names(4), dead={"node3"}, contention=0.2, seed=4)
    found, _ = localise_tcp(net)
    assert blamed(found) == {("node", ("node3",))}
    assert found.unresolved == ()
    assert set(found.cleared) == {"node1", "node2", "node4"}


def test_a_slow_link_between_two_good_nodes_is_named_as_the_link() -> None:
    nodes = names(8)
    net = Network(nodes, slow_links={("node3", "node4")}, seed=5)
    found, _ = localise_tcp(net)
    assert blamed(found) == {("link", ("node3", "node4"))}
    assert {"node3", "node4"} <= set(found.cleared)  # good apart


# -- all-reduce ----------------------------------------------------------------------


def test_the_allreduce_is_localised_when_it_fails_or_falls_below_its_floor() -> None:
    sizes = (SweepPoint(1 << 20, 1.0, 9.0, 9.0), SweepPoint(1 << 30, 1.0, 40.0, 40.0))
    measured = AllreduceResult("nccl", 8, sizes=sizes)
    failed = AllreduceResult("nccl", 8, error="NCCL error")
    assert bl.allreduce_floor_gb_s(Thresholds(busbw_min_gb_s=30), None) == 30
    assert bl.allreduce_floor_gb_s(Thresholds(busbw_min_gb_s=30), 80.0) == 80
    assert not bl.allreduce_is_bad(measured, 30.0)  # graded at 1 GiB
    assert bl.allreduce_is_bad(measured, 80.0)
    assert bl.allreduce_is_bad(failed, 0.0)
    assert not bl.allreduce_is_bad(AllreduceResult("gloo", 1, error="fewer than 2 ranks"), 0.0)
    assert bl.allreduce_measured(measured) == 40.0
    assert isinstance(bl.allreduce_measured(failed), Failed)
    verdict = bl.allreduce_verdict(0.0)
    assert verdict.floor is None and verdict.is_bad(4.0, [10.0, 11.0])


def test_a_node_that_slows_or_breaks_every_allreduce_it_is_in_is_named() -> None:
    """A group's busbw is its slowest node's link; a dead node fails the collective."""
    nodes = names(16)
    link_gb_s = {n: 24.0 for n in nodes} | {"node11": 3.0}
    rounds: list[int] = []

    def probe(groups: Sequence[tuple[str, ...]]) -> list[ProbeResult]:
        rounds.append(len(groups))
        found: list[ProbeResult] = []
        for g in groups:
            found.append(Failed("NCCL timeout") if "node4" in g else min(link_gb_s[n] for n in g))
        return found

    given = [
        (tuple(nodes), bl.allreduce_measured(AllreduceResult("nccl", 16, error="NCCL timeout")))
    ]
    found = localise(nodes, probe, bl.allreduce_verdict(0.0), given, bl.OPTIONS)
    assert blamed(found) == {("node", ("node4",)), ("node", ("node11",))}
    assert len(rounds) <= 12


# -- what the job writes, and the checks it becomes ----------------------------------


def test_the_section_names_the_culprit_with_its_evidence_in_words() -> None:
    net = Network(names(5), slow_in={"node2"}, noise=0.0)
    found, _ = localise_tcp(net)
    section = bl.localisation_section(found, "Gbit/s")
    assert section.conclusion == "localised"
    assert (section.rounds, section.probes) == (found.rounds_used, found.probes_run)
    (culprit,) = section.culprits
    assert (culprit.kind, culprit.nodes) == ("node", ("node2",))
    assert all(r.bad and "node2" in r.group for r in culprit.evidence)
    # the ring's pair (node1 cleared since) and one round with a known-good partner
    assert found.rounds_used == 1
    assert culprit.summary == "slow in 2 of 2 tests with it, fine without it: 0.49 vs 9.8 Gbit/s"
    assert section.readings[0].round == 0 and section.flakes == ()
    # as the job writes it: values rounded, no error where there was none
    written = section.to_json()
    assert list(written) == [
        "conclusion", "unit", "rounds", "probes", "nodes", "culprits", "flakes",
        "unresolved", "describe", "readings",
    ]  # fmt: skip
    assert written["nodes"] == 5 and written["describe"] == found.describe()
    reading = written["culprits"][0]["evidence"][0]
    assert list(reading) == ["round", "group", "role", "value", "bad"]
    assert reading["value"] == round(reading["value"], 4)


def test_a_links_summary_compares_the_pair_with_its_ends_apart() -> None:
    found, _ = localise_tcp(Network(names(8), slow_links={("node3", "node4")}, noise=0.0))
    (culprit,) = bl.localisation_section(found, "Gbit/s").culprits
    assert culprit.kind == "link"
    assert re.fullmatch(
        r"slow in (\d) of \1 tests of the pair, fine apart: 0.49 vs 9.8 Gbit/s", culprit.summary
    )
