"""Preflight's terminal summary: it fits a screen at any node count and names every culprit.

The reports are built by the real graders (host, port range, GPU on the NVML fake,
the Ray ports' tally, versions, clocks, driver) the way ``run_preflight`` composes them, from facts
made in the test: a whole cluster's worth of checks without a cluster.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache

from fake_nvml import FakeGpu, FakeNvml

from toolkit.inventory.hostrange import expand_hosts
from toolkit.node.facts import gpu_facts
from toolkit.nodeinfo.gpu_facts import GpuFacts
from toolkit.nodeinfo.host_facts import HostFacts, PortReach, SoftwareFacts
from toolkit.preflight import checks, gpu_checks
from toolkit.preflight.peers import choose_mode, select_peers
from toolkit.preflight.port_reach import ReachTally
from toolkit.preflight.result import Check, PreflightReport
from toolkit.preflight.runner import HEAD_PORTS, NODE_PORTS
from toolkit.preflight.terminal_summary import MAX_LINES, failed_nodes, family, scope_nodes

GiB = 1024**3
MiB = 1024**2
GPUS = 8


@dataclass
class Faults:
    """What is wrong where; a healthy cluster by default."""

    dev_shm_bytes: dict[str, int | None] = field(default_factory=dict)
    closed: dict[tuple[str, str], str] = field(default_factory=dict)  # (dst, port) -> error
    unreachable: dict[tuple[str, str, str], str] = field(default_factory=dict)  # src, dst, port
    ecc: set[str] = field(default_factory=set)
    gpu_count: dict[str, int] = field(default_factory=dict)
    loopback: set[str] = field(default_factory=set)
    clock_s: dict[str, float] = field(default_factory=dict)
    ray: dict[str, str] = field(default_factory=dict)


def host(node: str, faults: Faults) -> HostFacts:
    return HostFacts(
        hostname=node,
        hostname_addresses=("127.0.1.1",) if node in faults.loopback else ("10.0.0.1",),
        dev_shm_bytes=faults.dev_shm_bytes.get(node, 16 * GiB),
        memlock_bytes=None,
        nofile=1048576,
        disk_path="/data",
        disk_free_bytes=500 * GiB,
        ephemeral_ports=(32768, 60999),
    )


@cache
def gpus(node: str, count: int, ecc: bool) -> GpuFacts:
    """The node's GPU facts, read by the node script's code from the NVML fake."""
    devices = [
        FakeGpu(
            uuid=f"GPU-{int(node[4:]):08d}-{i:04d}-c2cb-6a5e-1a2b3c4d5e6f",
            ecc_volatile_uncorrected=2 if ecc and i == 3 else 0,
        )
        for i in range(count)
    ]
    return GpuFacts.from_json(node, gpu_facts(FakeNvml(devices)))


def cluster_report(size: int, faults: Faults) -> PreflightReport:
    """Every check of a ``size``-node cluster (head: node01), composed as the runner does."""
    nodes = [f"node{i:02d}" for i in range(1, size + 1)]
    head = nodes[0]
    pinned = {"gcs": 6379, "dashboard": 8265, "node_manager": 6700, "object_manager": 6701}
    report = PreflightReport(f"c{size}", duration_s=2.5)
    peers = select_peers(nodes, nodes, choose_mode(None, size))
    tally = ReachTally(nodes, pinned | {"client_server": 10001}, peers)
    facts_gpus: dict[str, GpuFacts] = {}
    for src in nodes:
        facts = host(src, faults)
        report.checks.append(Check("connect.node", src, "pass", src))
        report.checks += checks.host_checks(src, facts, multi_node=True)
        report.checks.append(checks.port_range_check(src, facts, pinned))
        found = gpus(src, faults.gpu_count.get(src, GPUS), src in faults.ecc)
        facts_gpus[src] = found
        report.checks += gpu_checks.gpu_checks(src, found, GPUS)
        reach: dict[str, PortReach] = {}
        for dst in peers.peers[src]:
            for port in NODE_PORTS + (HEAD_PORTS if dst == head else ()):
                error = faults.unreachable.get((src, dst, port)) or faults.closed.get((dst, port))
                reach[f"{dst}:{port}"] = (
                    PortReach(False, error=error) if error else PortReach(True, 0.4)
                )
        tally.add(src, reach)
    report.checks += tally.checks()
    base = {"python": "3.11.7", "ray": "2.60.0", "torch": "2.13.0"}
    report.checks += checks.version_checks(
        {n: SoftwareFacts(base | {"ray": faults.ray.get(n, "2.60.0")}) for n in nodes}
    )
    report.checks += gpu_checks.driver_checks(facts_gpus)
    report.checks += checks.clock_checks(
        {n: (faults.clock_s.get(n, 0.0), 0.01) for n in nodes}, head
    )
    return report


def named(text: str) -> set[str]:
    """Every node the text names, ranges (``node03-node09``) expanded."""
    found: set[str] = set()
    for first, last in re.findall(r"\b(node\d+)(?:-(node\d+))?\b", text):
        found.update(expand_hosts(f"node[{first[4:]}-{last[4:]}]") if last else [first])
    return found


FAULTS_64 = Faults(
    # Alike on eight nodes (a warning), and two failing each in their own way.
    dev_shm_bytes={f"node{i:02d}": 1 * GiB for i in (3, 4, 5, 6, 7, 8, 9, 12)}
    | {"node40": None, "node41": 64 * MiB},
    closed={("node07", "object_manager"): "connection refused"},  # every pair into node07
    unreachable={("node20", "node21", "node_manager"): "timed out after 2 s (filtered?)"},
    ecc={"node30", "node31"},
    gpu_count={"node50": 7},
    loopback={"node60"},
    clock_s={"node33": 8.0},
    ray={"node44": "2.59.0"},
)


def test_64_nodes_fit_a_screen_naming_every_failed_node_and_grouping_alike_ones() -> None:
    report = cluster_report(64, FAULTS_64)
    # A check per node and port (64 x 2 + the head's 3), not per pair: node21's
    # node_manager, reached by 62 of 63, has the failed pair's check instead.
    ports = [c for c in report.checks if c.name.startswith("net.port.")]
    assert len(ports) == 64 * 2 + 3
    assert ("net.port.node_manager", "node21") not in {(c.name, c.scope) for c in ports}
    assert len(report.checks) < 1500
    text = report.render()
    lines = text.splitlines()
    assert len(lines) <= MAX_LINES, text

    # The counts by family add up to every check.
    table = {row.split()[0]: row.split()[1:] for row in lines[2:8]}
    assert list(table) == ["connect", "host", "gpu", "net", "software", "total"]
    assert sum(map(int, table["total"])) == len(report.checks)
    fails_by_family = {
        f: sum(c.status == "fail" for c in report.checks if family(c.name) == f) for f in table
    }
    assert all(int(table[f][2]) == fails_by_family[f] for f in table if f != "total")

    # Every node with a problem is named: the ones that failed their own checks (the
    # node with the closed port among them), both ends of the one filtered pair, and
    # the warnings.
    problems = {n for c in report.checks if c.status != "pass" for n in scope_nodes(c.scope)}
    culprits = {"node07", "node20", "node21"} | set(report.failed_nodes())
    assert culprits <= named(text) and culprits <= problems
    warned = {c.scope for c in report.checks if c.status == "warn"}
    assert warned <= named(text)
    assert report.failed_nodes() == [
        *("node07", "node30", "node31", "node33", "node40", "node41", "node44", "node50", "node60")
    ]

    # Alike problems share a line: 63 pairs into node07 are one check, eight /dev/shm
    # warnings one line.
    closed = [line for line in lines if line.startswith("  FAIL  net.port.object_manager")]
    assert closed == [
        "  FAIL  net.port.object_manager  node07              object_manager port 6701 "
        "refused from 63 of 63 peers (want reachable from every peer)"
    ]
    assert "hint: open object_manager port 6701 on node07 to the cluster (firewall rules)" in text
    shm_warn = [line for line in lines if line.startswith("  WARN  host.dev_shm")]
    assert shm_warn == [
        "  WARN  host.dev_shm             node03-node09, node12 (8 nodes)  1.0 GiB (want >= 2.0 GiB)"
    ]
    # ... and the nodes that failed it differently stand on their own lines.
    assert re.search(r"FAIL +host\.dev_shm +node40 +no /dev/shm", text)
    assert re.search(r"FAIL +host\.dev_shm +node41 +64 MiB", text)
    # The one filtered pair is its own line, with its own reading and hint.
    assert re.search(r"FAIL +net\.port\.node_manager +node20->node21 +timed out", text)
    assert "hint: node20 cannot reach node_manager port 6700 on node21 while others can" in text
    # The next step: the nodes that failed their own checks.
    assert lines[-2].startswith(
        "next: investigate node07, node30-node31, node33, node40-node41, node44, node50, "
        "node60 (9 nodes), where node checks failed (gpu.count, gpu.ecc, host.clock_offset, "
    )
    assert lines[-1] == "      every check: rtk preflight --verbose (or --json)"


def test_verbose_shows_every_check_and_json_stays_complete() -> None:
    report = cluster_report(64, FAULTS_64)
    verbose = report.render(verbose=True).splitlines()
    passed = [c for c in report.checks if c.status == "pass"]
    assert sum(line.startswith("  PASS") for line in verbose) == len(passed)
    shown = "\n".join(verbose)
    for check in report.checks:
        if check.status != "pass":
            assert check.scope in shown
    record = json.loads(json.dumps(report.to_json()))
    assert len(record["checks"]) == len(report.checks)
    assert PreflightReport.from_record(report.to_record()).checks == report.checks


def test_a_healthy_cluster_is_a_few_lines() -> None:
    report = cluster_report(6, Faults())
    text = report.render()
    lines = text.splitlines()
    assert report.status == "pass"
    assert lines[0] == "preflight of c6: PASS in 2.5 s"
    assert lines[-1] == f"  all {len(report.checks)} checks passed"
    assert len(lines) <= 8, text
    assert [row.split()[0] for row in lines[2:-1]] == ["connect", "host", "gpu", "net", "software"]
    assert sum(int(row.split()[1]) for row in lines[2:-1]) == len(report.checks)
    assert report.render(only_problems=True).splitlines() == [lines[0], lines[-1]]


def test_rtk_up_shows_only_the_problems_within_the_same_bound() -> None:
    report = cluster_report(64, FAULTS_64)
    text = report.render(only_problems=True)
    lines = text.splitlines()
    assert len(lines) <= MAX_LINES, text
    assert not any(line.startswith("  family") for line in lines)
    assert lines[1] == "  " + ", ".join(
        f"{sum(c.status == s for c in report.checks)} {word}"
        for s, word in (("pass", "passed"), ("warn", "warned"), ("fail", "failed"))
    )
    assert re.search(r"FAIL +host\.dev_shm +node40 +no /dev/shm", text)
    assert {"node07", "node20", "node21", *report.failed_nodes()} <= named(text)


def test_a_node_that_neither_reaches_nor_is_reached_is_three_lines_on_that_node() -> None:
    # node05 cannot reach anyone (its outgoing traffic is blocked), nor be reached.
    nodes = [f"node{i:02d}" for i in range(1, 17)]
    faults = Faults(
        unreachable={
            (s, d, p): "Connection refused"
            for s in nodes
            for d in nodes
            for p in NODE_PORTS + HEAD_PORTS
            if "node05" in (s, d) and s != d
        }
    )
    report = cluster_report(16, faults)
    text = report.render()
    lines = [line for line in text.splitlines() if line.startswith("  FAIL")]
    assert lines == [
        "  FAIL  net.port.node_manager    node05              node_manager port 6700 refused "
        "from 15 of 15 peers (want reachable from every peer)",
        "  FAIL  net.port.object_manager  node05              object_manager port 6701 refused "
        "from 15 of 15 peers (want reachable from every peer)",
        "  FAIL  net.port.outgoing        node05              reached none of its 15 peers' "
        "Ray ports (Connection refused) (want reaches its peers)",
    ]
    # Its peers' ports pass: node05's failures to reach them are its own.
    passed = {c.scope for c in report.checks if c.name.startswith("net.port.")}
    assert passed == set(nodes)
    assert "next: investigate node05, where node checks failed" in text
    assert [e.node for e in report.exclusions()] == ["node05"]


def test_many_different_failures_are_summed_up_within_the_bound() -> None:
    # Every node's clock off by its own amount, many pairs failing in their own ways and
    # dozens of different checks failing: the lines stay bounded and say what is left out.
    size = 200
    nodes = [f"n{i:03d}" for i in range(size)]
    found = [
        Check("host.clock_offset", n, "fail", f"+{i}.0 s vs n000", "within 0.5 s")
        for i, n in enumerate(nodes)
    ]
    found += [
        Check(
            "net.port.gcs", f"{a}->{b}", "fail", f"error {i % 7}", "reachable", f"open gcs on {b}"
        )
        for i, (a, b) in enumerate(zip(nodes, nodes[1:] + nodes[:1], strict=True))
    ]
    found += [
        Check(f"extra.check{i:02d}", nodes[i], "fail", "bad", "good", "fix it") for i in range(60)
    ]
    found += [Check("host.dev_shm", n, "pass", "16.0 GiB") for n in nodes]
    text = PreflightReport("big", found).render()
    lines = text.splitlines()
    assert len(lines) <= MAX_LINES, text
    # The checks on most nodes are shown, each summed up in one line.
    clock = [line for line in lines if "host.clock_offset" in line and "FAIL" in line]
    assert clock == [
        "  FAIL  host.clock_offset        n000-n199 (200 nodes)  200 different readings, "
        "e.g. +0.0 s vs n000 (want within 0.5 s)"
    ]
    gcs = [line for line in lines if "net.port.gcs" in line]
    assert gcs == [
        "  FAIL  net.port.gcs             200 pairs among n000-n199 (200 nodes)  "
        "7 different readings, e.g. error 0 (want reachable)"
    ]
    # The rest, one node each, are shown while they fit; the others are named.
    shown = {line.split()[1] for line in lines if line.startswith("  FAIL  extra.")}
    more = next(line for line in lines if line.startswith("  ... and "))
    left = int(more.split()[2])
    assert len(shown) + left == 60 and more.startswith(f"  ... and {left} more: extra.check")
    # The next step still names every node that failed a check of its own.
    assert lines[-2].startswith("next: investigate n000-n199 (200 nodes), where node checks fail")
    assert lines[-2].endswith("extra.check05, 55 more)")  # 60 + clock


def test_nodes_are_named_in_natural_order_whatever_order_the_checks_come_in() -> None:
    # reach_checks sorts its targets as text: n10 comes before n2.
    targets = sorted(f"n{i}" for i in range(2, 13))
    found = [Check("net.port.gcs", f"n1->{t}", "fail", "refused", "reachable") for t in targets]
    found += [Check("host.dev_shm", n, "fail", "64 MiB") for n in ("n11", "n3", "n2", "n10")]
    lines = PreflightReport("c", found).render().splitlines()
    assert "  FAIL  host.dev_shm             n2-n3, n10-n11 (4 nodes)  64 MiB" in lines
    assert (
        "  FAIL  net.port.gcs             n1 -> n2-n9, n10-n12 (11 nodes)  refused (want reachable)"
        in lines
    )
    assert failed_nodes(found) == ["n11", "n3", "n2", "n10"]  # as the checks came


def test_failed_nodes_are_those_that_failed_a_check_of_their_own() -> None:
    found = [
        Check("net.port.gcs", "a->b", "fail", "refused"),
        Check("host.dev_shm", "c", "warn", "1 GiB"),
        Check("gpu.ecc", "d", "fail", "GPU 0: 1"),
        Check("net.bandwidth.allreduce", "cluster", "fail", "slow"),
        Check("host.dev_shm", "d", "fail", "none"),
        Check("software.ray", "e", "fail", "2.59.0"),
    ]
    assert failed_nodes(found) == ["d", "e"]
    assert PreflightReport("c", found).failed_nodes() == ["d", "e"]
    assert [scope_nodes(s) for s in ("a->b", "c", "cluster")] == [("a", "b"), ("c",), ()]
