"""Which nodes a run could go on without, from synthetic checks, and the record that keeps them.

The checks are shaped as the runner makes them: node-scoped (``host.dev_shm`` on
``n3``), pair-scoped (``net.bandwidth.tcp`` on ``n1->n3``, one per pair tried), and the
cluster's. Ray-port checks (``net.port.*``) are graded per node where they are made
(``port_reach``), so their pairs are links only: the last tests make them for real.
"""

from __future__ import annotations

import json
from itertools import permutations

import pytest

from toolkit.errors import RunDirError
from toolkit.nodeinfo.host_facts import PortReach
from toolkit.preflight.exclusions import MIN_PEERS, bad_links, exclusions
from toolkit.preflight.peers import PeerMode, select_peers
from toolkit.preflight.port_reach import ReachTally
from toolkit.preflight.result import PreflightReport
from toolkit.rundir.preflight import BadLink, Check, Exclusion, PreflightRecord

NODES = ("n1", "n2", "n3", "n4")


def mesh(
    nodes: tuple[str, ...] = NODES, failing: set[tuple[str, str]] | None = None
) -> list[Check]:
    """A passing check per node and per ordered pair; ``failing`` pairs fail."""
    failing = failing or set()
    checks = [Check("host.dev_shm", n, "pass", "64 GiB") for n in nodes]
    for src, dst in permutations(nodes, 2):
        bad = (src, dst) in failing
        status = "fail" if bad else "pass"
        measured = "connection refused" if bad else "9.4 Gbit/s"
        checks.append(Check("net.bandwidth.tcp", f"{src}->{dst}", status, measured))
    checks.append(Check("software.ray", "cluster", "pass", "2.50.0"))
    return checks


def test_a_healthy_cluster_names_no_node_and_no_link() -> None:
    checks = mesh()
    assert exclusions(checks, "n1") == []
    assert bad_links(checks) == []
    record = PreflightReport("c", checks, head="n1").to_json()
    assert (record["exclude"], record["links"], record["excluded"]) == ([], [], [])


def test_a_node_that_failed_its_own_checks_is_named_with_each_reason() -> None:
    checks = mesh()
    checks[2] = Check("host.dev_shm", "n3", "fail", "64 MiB", "at least 1 GiB")
    checks.append(Check("gpu.count", "n3", "fail", "7 GPUs"))
    checks.append(Check("gpu.temperature", "n2", "warn", "84 C"))  # a warning names no one
    assert exclusions(checks, "n1") == [
        Exclusion("n3", ("host.dev_shm: 64 MiB", "gpu.count: 7 GPUs"))
    ]


def test_every_pair_into_one_node_failing_names_that_node_not_the_links() -> None:
    into_n3 = {(src, "n3") for src in NODES if src != "n3"}
    checks = mesh(failing=into_n3)
    found = exclusions(checks, "n1")
    assert [e.node for e in found] == ["n3"]
    assert found[0].reasons == (
        "net.bandwidth.tcp: failed on 3/3 pairs into n3 (connection refused)",
    )
    assert bad_links(checks, ["n3"]) == []  # its pairs are explained


def test_every_pair_out_of_one_node_failing_names_that_node() -> None:
    out_of_n2 = {("n2", dst) for dst in NODES if dst != "n2"}
    found = exclusions(mesh(failing=out_of_n2))
    assert [(e.node, e.head) for e in found] == [("n2", False)]
    assert all("pairs out of n2" in reason for reason in found[0].reasons)


def test_all_but_one_pair_into_a_node_failing_names_no_node_but_links() -> None:
    most = {("n1", "n3"), ("n2", "n3")}  # n4 -> n3 still passes
    checks = mesh(failing=most)
    assert exclusions(checks) == []
    links = bad_links(checks)
    assert [link.pair for link in links] == ["n1->n3", "n2->n3"]
    assert links[0].reasons == ("net.bandwidth.tcp: connection refused",)


def test_a_single_bad_pair_is_a_link_not_an_exclusion() -> None:
    checks = mesh(failing={("n2", "n4")})
    assert exclusions(checks) == []
    assert [link.pair for link in bad_links(checks)] == ["n2->n4"]
    record = PreflightReport("c", checks).to_json()
    assert record["exclude"] == []
    assert record["links"] == [
        {
            "pair": "n2->n4",
            "reasons": ["net.bandwidth.tcp: connection refused"],
        }
    ]


def test_fewer_than_min_peers_are_too_few_to_blame_a_node() -> None:
    def every_pair_into_n0_failing(peers: int) -> list[Check]:
        # n0 was paired with `peers` nodes only; the others' pairs among themselves
        # pass, so n0 is the only node that can stand out.
        nodes = tuple(f"n{i}" for i in range(MIN_PEERS + 2))
        paired = set(nodes[1 : peers + 1])
        checks = mesh(nodes, failing={(src, "n0") for src in paired})
        return [
            c
            for c in checks
            if "n0" not in (ends := c.scope.split("->"))
            or len(ends) == 1
            or set(ends) - {"n0"} <= paired
        ]

    enough = every_pair_into_n0_failing(MIN_PEERS)
    assert [e.node for e in exclusions(enough)] == ["n0"]
    too_few = every_pair_into_n0_failing(MIN_PEERS - 1)
    assert exclusions(too_few) == []
    assert [link.pair for link in bad_links(too_few)] == [f"n{i}->n0" for i in range(1, MIN_PEERS)]


def test_when_every_pair_fails_no_node_stands_out() -> None:
    everything = set(permutations(NODES, 2))
    checks = mesh(failing=everything)
    assert exclusions(checks) == []
    assert len(bad_links(checks)) == len(everything)


def test_the_head_is_named_but_marked_never_left_out_silently() -> None:
    into_head = {(src, "n1") for src in NODES if src != "n1"}
    checks = mesh(failing=into_head)
    checks.append(Check("host.disk_free", "n4", "fail", "1 GiB"))
    found = exclusions(checks, head="n1")
    assert [(e.node, e.head) for e in found] == [("n1", True), ("n4", False)]
    data = PreflightReport("c", checks, head="n1").to_json()
    assert [(e["node"], e["head"]) for e in data["exclude"]] == [("n1", True), ("n4", False)]


def test_nodes_come_in_the_order_the_checks_first_name_them() -> None:
    checks = [
        Check("connect.node", "b", "pass", "b"),
        Check("connect.node", "a", "pass", "a"),
        Check("host.dev_shm", "a", "fail", "1 MiB"),
        Check("host.dev_shm", "b", "fail", "1 MiB"),
    ]
    assert [e.node for e in exclusions(checks)] == ["b", "a"]


def test_the_record_round_trips_with_every_key() -> None:
    checks = mesh(failing={(src, "n3") for src in NODES if src != "n3"} | {("n2", "n4")})
    left_out = [Exclusion("n5", ("--exclude",))]
    report = PreflightReport("c", checks, 1.5, head="n1", excluded=left_out)
    text = json.dumps(report.to_json())
    record = PreflightRecord.from_json(json.loads(text))
    assert record == report.to_record()
    assert record.head == "n1"
    assert record.exclude == tuple(report.exclusions())
    assert record.links == (BadLink("n2->n4", record.links[0].reasons),)
    assert record.excluded == (Exclusion("n5", ("--exclude",)),)
    again = PreflightReport.from_record(record)
    assert (again.head, again.excluded, again.exclusions()) == ("n1", left_out, report.exclusions())


def test_a_record_written_before_the_keys_existed_still_reads() -> None:
    old = {
        "cluster": "c",
        "status": "fail",
        "duration_s": 2.0,
        "checks": [{"name": "host.dev_shm", "scope": "n2", "status": "fail", "measured": "1 MiB"}],
    }
    record = PreflightRecord.from_json(old)
    assert (record.head, record.exclude, record.links, record.excluded) == ("", (), (), ())
    # The report derives what to exclude from the checks; the new file has every key.
    written = PreflightReport.from_record(record).to_json()
    assert written["exclude"] == [{"node": "n2", "reasons": ["host.dev_shm: 1 MiB"], "head": False}]
    assert written["excluded"] == []


def test_a_malformed_exclusion_is_an_error_naming_where() -> None:
    data = PreflightReport("c", mesh()).to_json()
    data["exclude"] = [{"node": "n3", "reasons": "not a list"}]
    with pytest.raises(RunDirError, match=r"preflight.json: exclude\[0\]: reasons"):
        PreflightRecord.from_json(data)
    data["exclude"] = {"node": "n3"}
    with pytest.raises(RunDirError, match="preflight.json: exclude: expected a list"):
        PreflightRecord.from_json(data)


def test_the_terminal_report_says_which_nodes_the_run_went_on_without() -> None:
    report = PreflightReport(
        "c", mesh(), 0.5, head="n1", excluded=[Exclusion("n5", ("host.dev_shm: 1 MiB",))]
    )
    lines = report.render().splitlines()
    assert lines[1] == "  run without n5 (host.dev_shm: 1 MiB)"
    assert report.render(verbose=True).splitlines()[1] == lines[1]


def port_checks(
    closed: set[str], cut: set[tuple[str, str]], nodes: tuple[str, ...] = NODES
) -> list[Check]:
    """Every pair's Ray ports tried and graded as the runner does: ``closed`` nodes
    refuse every tester, ``cut`` pairs time out."""
    plan = select_peers(nodes, nodes, PeerMode(all_pairs=True))
    tally = ReachTally(nodes, {"node_manager": 6380, "object_manager": 6381}, plan)
    for src, peers in plan.peers.items():
        reach = {}
        for dst in peers:
            for port in ("node_manager", "object_manager"):
                if dst in closed:
                    reach[f"{dst}:{port}"] = PortReach(False, error="Connection refused")
                elif (src, dst) in cut:
                    reach[f"{dst}:{port}"] = PortReach(False, error="timed out after 2 s")
                else:
                    reach[f"{dst}:{port}"] = PortReach(True, 0.3)
        tally.add(src, reach)
    return [Check("host.dev_shm", n, "pass", "64 GiB") for n in nodes] + tally.checks()


def test_a_ray_port_no_tester_reaches_names_its_node_with_the_graded_reason() -> None:
    checks = port_checks(closed={"n3"}, cut=set())
    found = exclusions(checks, "n1")
    assert [e.node for e in found] == ["n3"]
    assert found[0].reasons == (
        "net.port.node_manager: node_manager port 6380 refused from 3 of 3 peers",
        "net.port.object_manager: object_manager port 6381 refused from 3 of 3 peers",
    )
    assert bad_links(checks, ["n3"]) == []


def test_failed_ray_port_pairs_are_links_even_when_they_all_meet_at_one_node() -> None:
    # n1 and n2 cannot reach n3, n4 can: two failed pairs into n3 and no passing pair
    # among the checks (passes are counted per node), yet n3 is not to blame.
    checks = port_checks(closed=set(), cut={("n1", "n3"), ("n2", "n3")})
    assert exclusions(checks) == []
    assert [link.pair for link in bad_links(checks)] == ["n1->n3", "n2->n3"]
    assert bad_links(checks)[0].reasons == (
        "net.port.node_manager: timed out after 2 s",
        "net.port.object_manager: timed out after 2 s",
    )
