"""Ray-port checks graded per node and port: a firewalled node is one check, a cut pair one."""

from __future__ import annotations

import json

from toolkit.nodeinfo.host_facts import PortReach
from toolkit.preflight.peers import PeerMode, PeerPlan, select_peers
from toolkit.preflight.port_reach import MAX_PAIR_CHECKS, SOURCES_KEPT, ReachTally
from toolkit.preflight.result import PreflightReport
from toolkit.rundir.preflight import PreflightRecord

PORTS = {"node_manager": 6380, "object_manager": 6381}
REFUSED = "Connection refused"


def nodes(count: int) -> list[str]:
    return [f"n{i:04d}" for i in range(1, count + 1)]


def tally(
    plan: PeerPlan,
    order: list[str],
    closed: dict[str, set[str]] | None = None,
    cut: set[tuple[str, str]] | None = None,
) -> ReachTally:
    """Every node's answer for its peers: ``closed`` ports refuse, ``cut`` pairs time out."""
    closed, cut = closed or {}, cut or set()
    found = ReachTally(order, PORTS, plan)
    for src, peers in plan.peers.items():
        reach = {}
        for dst in peers:
            for port in PORTS:
                if (src, dst) in cut:
                    reach[f"{dst}:{port}"] = PortReach(False, error="timed out after 2 s")
                elif port in closed.get(dst, set()):
                    reach[f"{dst}:{port}"] = PortReach(False, error=REFUSED)
                else:
                    reach[f"{dst}:{port}"] = PortReach(True, 0.3)
        found.add(src, reach)
    return found


def sampled(count: int) -> tuple[list[str], PeerPlan]:
    names = nodes(count)
    return names, select_peers(names, names, PeerMode(all_pairs=False, random_peers=8))


def test_a_healthy_cluster_is_a_passing_check_per_node_and_port() -> None:
    names, plan = sampled(200)
    checks = tally(plan, names).checks()
    assert len(checks) == 200 * 2
    assert {c.status for c in checks} == {"pass"}
    testers = plan.testers()
    first = checks[0]
    assert (first.name, first.scope) == ("net.port.node_manager", "n0001")
    assert first.measured == f"reached from {testers['n0001']} of {testers['n0001']} peers"


def test_one_firewalled_node_is_one_failure_on_that_node() -> None:
    names, plan = sampled(200)
    found = tally(plan, names, closed={"n0017": {"node_manager"}})
    failed = [c for c in found.checks() if c.status == "fail"]
    testers = plan.testers()["n0017"]
    assert [(c.name, c.scope) for c in failed] == [("net.port.node_manager", "n0017")]
    assert failed[0].measured == f"node_manager port 6380 refused from {testers} of {testers} peers"
    report = PreflightReport("c", found.checks(), reach=found.record())
    assert [e.node for e in report.exclusions()] == ["n0017"]
    record = report.to_record().reach
    assert record is not None and len(record.failures) == 1
    entry = record.failures[0]
    assert (entry.dst, entry.port, entry.tried, entry.reached) == (
        "n0017",
        "node_manager",
        testers,
        0,
    )
    assert set(entry.sources) == {s for s, p in plan.peers.items() if "n0017" in p}
    assert entry.errors == {REFUSED: testers}


def test_one_cut_pair_is_one_failure_on_the_pair_and_names_no_node() -> None:
    names, plan = sampled(200)
    src = "n0050"
    dst = plan.peers[src][3]
    found = tally(plan, names, cut={(src, dst)})
    failed = [c for c in found.checks() if c.status == "fail"]
    assert [(c.name, c.scope) for c in failed] == [
        ("net.port.node_manager", f"{src}->{dst}"),
        ("net.port.object_manager", f"{src}->{dst}"),
    ]
    report = PreflightReport("c", found.checks(), reach=found.record())
    assert report.exclusions() == []
    assert [link.pair for link in report.to_record().links] == [f"{src}->{dst}"]


def test_failed_pairs_past_the_bound_are_counted_in_one_check() -> None:
    names, plan = sampled(300)
    cut = {(s, plan.peers[s][1]) for s in names[:40]}  # 40 pairs x 2 ports
    checks = tally(plan, names, cut=cut).checks()
    pairs = [c for c in checks if c.status == "fail" and "->" in c.scope]
    assert len(pairs) == MAX_PAIR_CHECKS
    more = [c for c in checks if c.name == "net.port.pairs"]
    assert len(more) == 1 and more[0].scope == "cluster"
    assert more[0].measured.startswith(f"{80 - MAX_PAIR_CHECKS} more failed pairs")
    assert PreflightReport("c", checks).exclusions() == []


def test_a_port_closed_on_every_node_is_one_check_on_the_cluster() -> None:
    names, plan = sampled(100)
    checks = tally(plan, names, closed={n: {"object_manager"} for n in names}).checks()
    failed = [c for c in checks if c.status == "fail"]
    assert [(c.name, c.scope) for c in failed] == [("net.port.object_manager", "cluster")]
    assert failed[0].measured == "object_manager port 6381 refused on all 100 nodes from every peer"
    assert PreflightReport("c", checks).exclusions() == []


def test_a_node_that_reaches_nobody_is_its_own_failure_not_its_peers() -> None:
    names, plan = sampled(100)
    blocked = {("n0042", d) for d in plan.peers["n0042"]}
    checks = tally(plan, names, cut=blocked).checks()
    failed = [(c.name, c.scope) for c in checks if c.status == "fail"]
    assert failed == [("net.port.outgoing", "n0042")]
    assert sum(c.status == "pass" for c in checks) == 200  # its peers' ports pass


def test_the_record_is_bounded_and_round_trips() -> None:
    names = nodes(100)
    plan = select_peers(names, names, PeerMode(all_pairs=True))
    found = tally(plan, names, closed={"n0007": {"node_manager", "object_manager"}})
    record = found.record()
    assert (record.mode, record.pairs, record.testers_min) == ("all", 9900, 99)
    assert record.ports["node_manager"] == (9900, 9900 - 99)
    entry = record.failures[0]
    assert len(entry.sources) == SOURCES_KEPT and entry.sources_more == 99 - SOURCES_KEPT
    report = PreflightReport("c", found.checks(), reach=record)
    data = json.loads(json.dumps(report.to_json()))
    assert len(json.dumps(data["reach"])) < 4000
    assert PreflightRecord.from_json(data).reach == record
