"""Ray-port reachability graded per node and port, not per pair: bounded at any node count.

Each node's answer (``dst:port-name`` -> reached or why not) is added to a
``ReachTally`` as it arrives, and only what failed is kept pair by pair. The checks
(all named ``net.port.<port-name>``, as before):

- per node and port that every tester reached (a tester whose outgoing connections
  are blocked not counted against it): one passing check on that node
  (``reached from 9 of 9 peers``);
- a node's port that none of its testers reached, with ``exclusions.MIN_PEERS`` testers or
  more: one failing check on that node (``Connection refused from 9 of 9 peers``): the
  fault is there (a closed port, its firewall), and it is a node a run can go on
  without; likewise a node that reached none of its peers (``exclusions.MIN_PEERS`` or
  more) on any port: its outgoing connections are blocked (``net.port.outgoing``);
- the same port failed that way on every node: one check on the cluster (a firewall
  everywhere, or the inventory's port wrong), not a node each;
- any other failed pair (a link, not a node): a failing check on the pair, at most
  ``MAX_PAIR_CHECKS`` of them, then one check on the cluster counting the rest.

``ReachTally.record`` keeps, per node and port some tester failed to reach, who failed
and how (``preflight.json``'s ``reach``), bounded by ``FAILURES_KEPT`` entries of
``SOURCES_KEPT`` names.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from toolkit.nodeinfo.host_facts import PortReach
from toolkit.preflight.exclusions import MIN_PEERS
from toolkit.preflight.peers import PeerPlan
from toolkit.rundir.preflight import Check, PortFailures, ReachRecord

__all__ = [
    "FAILURES_KEPT",
    "MAX_PAIR_CHECKS",
    "PAIRS_KEPT",
    "SOURCES_KEPT",
    "ReachTally",
]

MAX_PAIR_CHECKS = 20  # failed pairs listed as checks; the rest are counted in one
SOURCES_KEPT = 32  # failed testers named per node and port in the record
FAILURES_KEPT = 1000  # node-and-port entries in the record
PAIRS_KEPT = 100_000  # failed pairs kept in memory to grade (a count past it)

NodePort = tuple[str, str]


@dataclass
class _Into:
    """One node's port, as its testers found it."""

    tried: int = 0
    reached: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (source, error)
    errors: Counter[str] = field(default_factory=Counter)


@dataclass
class _OutOf:
    """One node's attempts at its peers' ports."""

    tried: int = 0
    failed: int = 0
    errors: Counter[str] = field(default_factory=Counter)


class ReachTally:
    """Every node's port checks, added as each answer arrives (thread-safe).

    Args:
        order: Every node's name in inventory order (the checks come in it).
        numbers: Port name -> number, as the checks show them.
        plan: The peers each node was given.
    """

    def __init__(self, order: Sequence[str], numbers: Mapping[str, int], plan: PeerPlan) -> None:
        self.order = {name: i for i, name in enumerate(order)}
        self.numbers = dict(numbers)
        self.plan = plan
        self.into: dict[NodePort, _Into] = {}
        self.out_of: dict[str, _OutOf] = {}
        self.pairs_dropped = 0
        self._kept = 0
        self._lock = threading.Lock()

    def add(self, src: str, reach: Mapping[str, PortReach]) -> None:
        """``src``'s answer: ``dst:port-name`` -> its connection attempt."""
        with self._lock:
            out = self.out_of.setdefault(src, _OutOf())
            for target, result in reach.items():
                dst, _, port = target.rpartition(":")
                into = self.into.setdefault((dst, port), _Into())
                into.tried += 1
                out.tried += 1
                if result.ok:
                    into.reached += 1
                    continue
                error = result.error or "failed"
                into.errors[error] += 1
                out.failed += 1
                out.errors[error] += 1
                if self._kept < PAIRS_KEPT:
                    into.failed.append((src, error))
                    self._kept += 1
                else:
                    self.pairs_dropped += 1

    def checks(self) -> list[Check]:
        """The checks, in inventory order: per node and port, then pairs, then the cluster."""
        grade = _Grade(self)
        return grade.node_checks() + grade.pair_checks() + grade.cluster_checks()

    def record(self) -> ReachRecord:
        """The bounded record of what was tried and what failed (``preflight.json``)."""
        ports: dict[str, tuple[int, int]] = {}
        for (_, port), into in self.into.items():
            tried, reached = ports.get(port, (0, 0))
            ports[port] = (tried + into.tried, reached + into.reached)
        failing = [k for k in self._sorted(self.into) if self.into[k].reached < self.into[k].tried]
        failures = []
        for dst, port in failing[:FAILURES_KEPT]:
            into = self.into[(dst, port)]
            sources = sorted({s for s, _ in into.failed}, key=self._rank)
            failures.append(
                PortFailures(
                    dst,
                    port,
                    into.tried,
                    into.reached,
                    tuple(sources[:SOURCES_KEPT]),
                    into.tried - into.reached - len(sources[:SOURCES_KEPT]),
                    dict(into.errors.most_common()),
                )
            )
        testers = self.plan.testers()
        return ReachRecord(
            self.plan.mode.label,
            self.plan.seed,
            min(testers.values(), default=0),
            self.plan.pairs,
            dict(sorted(ports.items())),
            tuple(failures),
            max(0, len(failing) - FAILURES_KEPT),
        )

    def _rank(self, node: str) -> tuple[int, str]:
        return self.order.get(node, len(self.order)), node

    def _sorted(self, keys: Mapping[NodePort, object]) -> list[NodePort]:
        return sorted(keys, key=lambda k: (*self._rank(k[0]), k[1]))

    def port_text(self, port: str) -> str:
        """``node_manager port 6380``."""
        number = self.numbers.get(port)
        return f"{port} port {number}" if number is not None else port


class _Grade:
    """Which failures a node explains, and the checks that follow."""

    def __init__(self, tally: ReachTally) -> None:
        self.tally = tally
        into = tally.into
        # A node's port none of its testers reached (enough of them to agree).
        self.closed = {k for k, v in into.items() if v.tried >= MIN_PEERS and v.reached == 0}
        # A port closed on every node it was tried on, two or more: the cluster's.
        tested: Counter[str] = Counter(p for (_, p), v in into.items() if v.tried >= MIN_PEERS)
        closed: Counter[str] = Counter(p for _, p in self.closed)
        self.everywhere = {p for p, n in closed.items() if n >= 2 and n == tested[p]}
        self.closed = {k for k in self.closed if k[1] not in self.everywhere}
        # A node that reached none of its peers on any port, once the closed ports are
        # counted out (they failed for everyone).
        explained: Counter[str] = Counter()
        for (dst, port), v in into.items():
            if (dst, port) in self.closed or port in self.everywhere:
                explained.update(src for src, _ in v.failed)
        self.blocked: set[str] = set()
        for src, out in tally.out_of.items():
            left = out.tried - explained[src]
            peers = len(tally.plan.peers.get(src, ()))
            if peers >= MIN_PEERS and left > 0 and out.failed - explained[src] == left:
                self.blocked.add(src)

    def node_checks(self) -> list[Check]:
        tally = self.tally
        checks = []
        for dst, port in tally._sorted(tally.into):
            into = tally.into[(dst, port)]
            if port in self.everywhere:
                continue
            name, what = f"net.port.{port}", tally.port_text(port)
            if (dst, port) in self.closed:
                error = _short(into.errors.most_common(1)[0][0])
                checks.append(
                    Check(
                        name,
                        dst,
                        "fail",
                        f"{what} {error} from {into.tried} of {into.tried} peers",
                        "reachable from every peer",
                        f"open {what} on {dst} to the cluster (firewall rules), "
                        "and check Ray's process for it runs there",
                    )
                )
            elif into.reached + sum(s in self.blocked for s, _ in into.failed) == into.tried:
                checks.append(
                    Check(
                        name,
                        dst,
                        "pass",
                        f"reached from {into.reached} of {into.tried} peers",
                        "reachable from every peer",
                    )
                )
        for src in sorted(self.blocked, key=tally._rank):
            out = tally.out_of[src]
            error = out.errors.most_common(1)[0][0]
            peers = len(tally.plan.peers.get(src, ()))
            checks.append(
                Check(
                    "net.port.outgoing",
                    src,
                    "fail",
                    f"reached none of its {peers} peers' Ray ports ({error})",
                    "reaches its peers",
                    f"{src}'s outgoing connections are blocked: its firewall's output "
                    "rules, or its route to the cluster",
                )
            )
        return checks

    def pair_checks(self) -> list[Check]:
        tally = self.tally
        pairs: list[tuple[str, str, str, str]] = []
        for dst, port in tally._sorted(tally.into):
            if (dst, port) in self.closed or port in self.everywhere:
                continue
            for src, error in tally.into[(dst, port)].failed:
                if src not in self.blocked:
                    pairs.append((src, dst, port, error))
        checks = [
            Check(
                f"net.port.{port}",
                f"{src}->{dst}",
                "fail",
                error,
                "reachable",
                f"{src} cannot reach {tally.port_text(port)} on {dst} while others can: "
                "a route, a firewall rule between the two, or the link",
            )
            for src, dst, port, error in pairs[:MAX_PAIR_CHECKS]
        ]
        more = len(pairs) - MAX_PAIR_CHECKS + tally.pairs_dropped
        if more > 0:
            checks.append(
                Check(
                    "net.port.pairs",
                    "cluster",
                    "fail",
                    f"{more} more failed pairs (node and port: rtk preflight --json, reach)",
                    "reachable",
                    "pairs fail between nodes that others reach: routes, firewall rules",
                )
            )
        return checks

    def cluster_checks(self) -> list[Check]:
        tally = self.tally
        checks = []
        for port in sorted(self.everywhere):
            alike = [v for (_, p), v in tally.into.items() if p == port]
            errors = sum((v.errors for v in alike), Counter[str]())
            checks.append(
                Check(
                    f"net.port.{port}",
                    "cluster",
                    "fail",
                    f"{tally.port_text(port)} {_short(errors.most_common(1)[0][0])} on all "
                    f"{len(alike)} nodes from every peer",
                    "reachable from every peer",
                    f"no node reaches {tally.port_text(port)} on another: a firewall on "
                    "every node, or Ray listens on another port than the inventory's ports:",
                )
            )
        return checks


def _short(error: str) -> str:
    """``refused`` of ``Connection refused``; ``no route to host`` of ``No route to host``."""
    error = error.removeprefix("Connection ").removeprefix("connection ")
    return error[:1].lower() + error[1:]
