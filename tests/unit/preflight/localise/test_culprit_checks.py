"""Culprits become failed checks scoped to the node (or ``a<->b``), with words and a hint."""

from __future__ import annotations

from dataclasses import replace

from toolkit.preflight.bandwidth import localise as bl
from toolkit.preflight.bandwidth.job_result import BandwidthResult, TcpPair
from toolkit.preflight.bandwidth.localise_section import (
    LocaliseSection,
    ShownCulprit,
    ShownReading,
)
from toolkit.preflight.checks import bandwidth_checks
from toolkit.preflight.localise.culprit_checks import kind_checks, link_scope, localise_checks
from toolkit.preflight.localise.find import Culprit, Flake, Localisation, Reading
from toolkit.preflight.result import PreflightReport
from toolkit.preflight.terminal_summary import failed_nodes, scope_nodes


def reading(round_: int, group: tuple[str, ...], value: float | None, bad: bool) -> Reading:
    return Reading(round_, group, "single", value, "" if value is not None else "refused", bad)


def found_node2() -> Localisation:
    """node2 slow in 3 of 3 tests with it; node1, node3, node4 fine without it."""
    readings = (
        reading(0, ("node1", "node2"), 0.48, True),
        reading(0, ("node3",), 9.9, False),
        reading(0, ("node4",), 9.7, False),
        reading(1, ("node1", "node3"), 9.8, False),
        reading(1, ("node2", "node4"), 0.49, True),
        reading(2, ("node2", "node3"), 0.51, True),
    )
    culprit = Culprit("node", ("node2",), (readings[0], readings[4], readings[5]))
    return Localisation(
        "localised", (culprit,), (), ("node3", "node4", "node1"), (), readings,
        ("node1", "node2", "node3", "node4"),
    )  # fmt: skip


def test_a_node_culprit_is_a_failed_check_scoped_to_the_node() -> None:
    section = bl.localisation_section(found_node2(), "Gbit/s")
    (check,) = kind_checks("tcp", section)
    assert (check.name, check.scope, check.status) == ("net.localise.tcp", "node2", "fail")
    assert check.measured == (
        "slow in 3 of 3 tests with it, fine without it: 0.49 vs 9.8 Gbit/s (2 rounds, 3 probes)"
    )
    assert "rtk up --exclude node2" in check.hint
    # the node-scoped fail is what the exclusion list is built from
    report = PreflightReport("c", localise_checks({"tcp": section}))
    assert report.failed_nodes() == ["node2"]


def test_a_link_culprit_is_scoped_to_both_ends_and_excludes_neither() -> None:
    readings = (
        reading(0, ("a", "b"), None, True),
        reading(1, ("a", "c"), 9.0, False),
        reading(1, ("b", "d"), 9.4, False),
        reading(2, ("a", "b"), None, True),
    )
    link = Culprit("link", ("a", "b"), (readings[0], readings[3], readings[1], readings[2]))
    found = Localisation(
        "localised", (link,), (), ("c", "d", "a", "b"), (), readings, ("a", "b", "c", "d")
    )
    (check,) = kind_checks("allreduce", bl.localisation_section(found, "GB/s busbw"))
    assert (check.name, check.scope, check.status) == ("net.localise.allreduce", "a<->b", "fail")
    assert check.measured == (
        "failed in 2 of 2 tests of the pair, fine apart: 9.2 GB/s busbw (link; 2 rounds, 3 probes)"
    )
    assert scope_nodes(link_scope("a", "b")) == ("a", "b")
    assert failed_nodes([check]) == []  # a pair's check: which end goes is for the user


def test_no_culprit_is_one_warning_for_the_cluster() -> None:
    wide = LocaliseSection(
        "cluster-wide", rounds=3, probes=9, node_count=8,
        unresolved=(("n1", "n2", "n3", "n4", "n5", "n6"),),
    )  # fmt: skip
    (check,) = kind_checks("tcp", wide)
    assert (check.scope, check.status) == ("cluster", "warn")
    assert check.measured.startswith("no single culprit: 6 of 8 nodes")
    flaky = Localisation(
        "flaky", (), (Flake(("n1", "n2"), ()),), ("n1", "n2"), (), (), ("n1", "n2", "n3")
    )
    (check,) = kind_checks("tcp", bl.localisation_section(flaky, "Gbit/s"))
    assert check.status == "warn" and "n1,n2" in check.measured
    (check,) = kind_checks("allreduce", LocaliseSection(error="RayActorError: died", groups=()))
    assert check.status == "warn" and "RayActorError" in check.measured
    healthy = Localisation("healthy", (), (), ("n1", "n2"), (), (), ("n1", "n2"))
    assert kind_checks("tcp", bl.localisation_section(healthy, "Gbit/s")) == []


def test_the_bandwidth_checks_carry_the_localise_section() -> None:
    ring = (
        TcpPair("node1", "node2", 2, 0.48),
        TcpPair("node2", "node3", gbit_s=9.9),
        TcpPair("node3", "node4", gbit_s=9.7),
        TcpPair("node4", "node1", gbit_s=9.8),
    )
    section = {"tcp": bl.localisation_section(found_node2(), "Gbit/s")}
    found = bandwidth_checks(BandwidthResult(tcp=ring, localise=section))
    failed = {(c.name, c.scope) for c in found if c.status == "fail"}
    assert failed == {("net.bandwidth.tcp", "node1->node2"), ("net.localise.tcp", "node2")}


def test_a_slow_ring_pair_measured_fine_again_by_localisation_only_warns() -> None:
    ring = (
        TcpPair("n1", "n2", 2, 0.4),
        TcpPair("n2", "n3", 1, 9.0),
        TcpPair("n3", "n4", 2, 1.0),
        TcpPair("n4", "n1", 1, 9.5),
    )
    found = LocaliseSection(
        "localised",
        culprits=(ShownCulprit("node", ("n2",), "slow in 2 of 2 tests"),),
        readings=(
            ShownReading(1, ("n1", "n2"), "part", 0.4, True),
            ShownReading(1, ("n3", "n4"), "part", 8.0, False),
        ),
    )
    checks = bandwidth_checks(BandwidthResult(tcp=ring, localise={"tcp": found}))
    status = {(c.name, c.scope): c.status for c in checks}
    assert status[("net.bandwidth.tcp", "n1->n2")] == "fail"  # its end is the culprit
    assert status[("net.bandwidth.tcp", "n3->n4")] == "warn"  # measured fine again
    assert status[("net.localise.tcp", "n2")] == "fail"
    # Without a good reading of both ends, a slow pair stays failed.
    found = replace(found, readings=found.readings[:1])
    checks = bandwidth_checks(BandwidthResult(tcp=ring, localise={"tcp": found}))
    assert {(c.scope, c.status) for c in checks if c.name == "net.bandwidth.tcp"} >= {
        ("n3->n4", "fail")
    }
