"""The bandwidth job's Ray side: the actors on each node, and the probes localisation runs.

``Peer`` (one per node) sends and receives TCP streams; ``ray_ranks.Rank`` (one per
GPU, or per node without GPUs) joins an all-reduce. A probe runs one round of localisation
(``toolkit.preflight.localise.find``): tests on disjoint groups of nodes, all at once.

- ``TcpProbe``: each group's streams (``localise.group_streams``: a ring
  inside the group, both ways for a pair) start together; every answer is awaited
  against one deadline, and a stream that misses it failed.
- ``AllreduceProbe``: each group gets its own process group (its own rendezvous on
  its first node) and times one size; the groups run at once. A group that fails or
  misses the deadline has its ranks killed and started afresh for the next round,
  since a rank stuck in a collective would hold its actor.

Both keep every test they ran (``tests``) for the job's result (``LocaliseSection``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ray

from toolkit.errors import RtkError
from toolkit.preflight.bandwidth import measure
from toolkit.preflight.bandwidth.localise import round_streams, tcp_group_results
from toolkit.preflight.bandwidth.localise_section import GroupTest, TcpTest
from toolkit.preflight.load.job_result import SweepPoint
from toolkit.preflight.localise.find import Failed, ProbeResult
from toolkit.preflight.ray_ranks import CALL_TIMEOUT_S, Rank, RayNode, pinned
from toolkit.preflight.ray_ranks import error_text as short_error
from toolkit.rundir.record_base import record_fields

Say = Callable[[str], None]


@ray.remote(num_cpus=0, max_restarts=0)
class Peer:
    """One node's end of the TCP tests."""

    def __init__(self) -> None:
        self.sink: measure.TcpSink | None = None

    def listen(self) -> int:
        """Start the receiver; its port."""
        self.sink = self.sink or measure.TcpSink()
        return self.sink.port

    def send(self, host: str, port: int, duration_s: float) -> measure.TcpSendResult:
        """Send to another node's receiver for ``duration_s``."""
        return measure.tcp_send(host, port, duration_s)


@dataclass(frozen=True)
class TcpPeers:
    """Every node's ``Peer``, listening: its actor, its receiver's port, its address.

    Attributes:
        actors: Node -> its ``Peer`` actor (a Ray actor handle).
        ports: Node -> the port its receiver listens on.
        hosts: Node -> the address the others reach it at.
    """

    actors: Mapping[str, Any]
    ports: Mapping[str, int]
    hosts: Mapping[str, str]

    def send(self, src: str, dst: str, duration_s: float) -> Any:
        """Start ``src`` sending to ``dst``; the Ray ref of its ``TcpSendResult``."""
        return self.actors[src].send.remote(self.hosts[dst], self.ports[dst], duration_s)


def sent(answer: object) -> measure.TcpSendResult:
    """A send's answer from Ray, or why there is none (an exception, or something else)."""
    if isinstance(answer, measure.TcpSendResult):
        return answer
    if isinstance(answer, BaseException):
        return measure.TcpSendResult(error=short_error(answer))
    return measure.TcpSendResult(error=f"not a TCP test's answer: {answer!r:.200}")


def get_by(refs: Sequence[Any], deadline_s: float) -> list[Any]:
    """Each ref's value, or the exception it raised or ``TimeoutError`` past the deadline."""
    found: list[Any] = []
    for ref in refs:
        try:
            found.append(ray.get(ref, timeout=max(0.1, deadline_s - time.monotonic())))
        except Exception as e:  # noqa: BLE001 - a failed test is a result
            found.append(e)
    return found


class TcpProbe:
    """A round of TCP tests on disjoint groups at once, between ``Peer`` actors."""

    def __init__(self, peers: TcpPeers, duration_s: float, say: Say) -> None:
        self.peers, self.duration_s, self.say = peers, duration_s, say
        self.rounds = 0
        self.tests: list[TcpTest] = []  # every stream

    def __call__(self, groups: Sequence[tuple[str, ...]]) -> list[ProbeResult]:
        """Run every group's streams at once; each group's slowest stream, or a failure."""
        self.rounds += 1
        streams = round_streams(groups)
        refs = [self.peers.send(src, dst, self.duration_s) for _, (src, dst) in streams]
        deadline_s = time.monotonic() + min(CALL_TIMEOUT_S, 30.0 + 10 * self.duration_s)
        answers = [sent(a) for a in get_by(refs, deadline_s)]
        for (_, (src, dst)), answer in zip(streams, answers, strict=True):
            self.tests.append(TcpTest(self.rounds, src, dst, answer))
        results = tcp_group_results(len(groups), streams, answers)
        bad = sum(1 for r in results if isinstance(r, Failed))
        self.say(
            f"localise tcp round {self.rounds}: {len(groups)} groups, {len(streams)} streams"
            + (f", {bad} failed" if bad else "")
        )
        return results


@dataclass
class Launch:
    """An all-reduce started on some nodes' ranks: its actors and their sweeps."""

    nodes: tuple[str, ...]
    actors: list[Any]
    refs: list[Any]


class AllreduceProbe:
    """A round of all-reduces on disjoint groups at once, each its own process group."""

    def __init__(
        self,
        nodes: Mapping[str, RayNode],
        ranks_per_node: dict[str, int],
        use_gpus: bool,
        size_bytes: int,
        say: Say,
    ) -> None:
        self.nodes, self.ranks_per_node, self.use_gpus = nodes, ranks_per_node, use_gpus
        self.size_bytes, self.say = size_bytes, say
        self.actors: dict[str, list[Any]] = {}  # node -> its ranks, kept between rounds
        self.rounds = 0
        self.tests: list[GroupTest] = []  # every group

    def ranks_of(self, node: str) -> list[Any]:
        """The node's rank actors, started on first use."""
        if node not in self.actors:
            gpus = 1 if self.use_gpus else 0
            strategy = pinned(self.nodes[node])
            self.actors[node] = [
                Rank.options(scheduling_strategy=strategy, num_gpus=gpus).remote()  # type: ignore[attr-defined]
                for _ in range(self.ranks_per_node[node])
            ]
        return self.actors[node]

    def launch(self, group: Sequence[str], deadline_s: float, sizes_bytes: list[int]) -> Launch:
        """Start one group's sweep: place its ranks, find a rendezvous, start the sweeps."""
        placed = [(n, a) for n in group for a in self.ranks_of(n)]
        actors = [a for _, a in placed]
        ids = ray.get([a.gpu_ids.remote() for a in actors], timeout=_left(deadline_s))
        visible: dict[str, list[str]] = {}
        for (name, _), own in zip(placed, ids, strict=True):
            visible.setdefault(name, []).extend(own)
        port = ray.get(actors[0].free_port.remote(), timeout=_left(deadline_s))
        init = f"tcp://{self.nodes[group[0]].address}:{port}"
        refs = []
        for rank, ((name, actor), own) in enumerate(zip(placed, ids, strict=True)):
            shown = sorted(visible[name], key=lambda i: (len(i), i))
            index = shown.index(own[0]) if self.use_gpus else 0
            refs.append(
                actor.sweep.remote(
                    rank,
                    len(placed),
                    init,
                    ",".join(shown) if self.use_gpus else None,
                    index,
                    sizes_bytes,
                )
            )
        return Launch(tuple(group), actors, refs)

    def __call__(self, groups: Sequence[tuple[str, ...]]) -> list[ProbeResult]:
        """Run an all-reduce on every group at once; each group's busbw, or a failure."""
        self.rounds += 1
        deadline_s = time.monotonic() + CALL_TIMEOUT_S
        launches: list[Launch | BaseException] = []
        for group in groups:
            try:
                launches.append(self.launch(group, deadline_s, [self.size_bytes]))
            except Exception as e:  # noqa: BLE001 - a failed test is a result
                launches.append(e)
        results: list[ProbeResult] = []
        for group, launch in zip(groups, launches, strict=True):
            result = self._finish(launch, deadline_s)
            results.append(result)
            if isinstance(result, Failed):
                self.tests.append(GroupTest(self.rounds, tuple(group), error=result.error))
                self.restart(group)
            else:
                self.tests.append(GroupTest(self.rounds, tuple(group), busbw_gb_s=float(result)))
        bad = sum(1 for r in results if isinstance(r, Failed))
        self.say(
            f"localise all-reduce round {self.rounds}: {len(groups)} groups"
            + (f", {bad} failed" if bad else "")
        )
        return results

    def _finish(self, launch: Launch | BaseException, deadline_s: float) -> ProbeResult:
        if isinstance(launch, BaseException):
            return Failed(short_error(launch))
        sweep = self.finish(launch, deadline_s)
        if isinstance(sweep, Failed):
            return sweep
        return sweep[0].busbw_gb_s if sweep else Failed("no sizes measured")

    def finish(self, launch: Launch, deadline_s: float) -> tuple[SweepPoint, ...] | Failed:
        """A started sweep's sizes (the slowest rank's, as every rank has them), or why not."""
        sweeps = get_by(launch.refs, deadline_s)
        errors = [s for s in sweeps if isinstance(s, BaseException)]
        if errors:
            return Failed(short_error(errors[0]))
        found = sweeps[0]
        if not isinstance(found, list):
            return Failed(f"not an all-reduce sweep: {found!r:.200}")
        try:
            return tuple(
                SweepPoint.from_fields(record_fields(p, f"all-reduce sweep, size {i}"))
                for i, p in enumerate(found)
            )
        except RtkError as e:
            return Failed(str(e))

    def restart(self, group: Sequence[str]) -> None:
        """Kill a failed group's ranks (one may be stuck in a collective); new ones next time."""
        for node in group:
            for actor in self.actors.pop(node, []):
                ray.kill(actor)

    def close(self) -> None:
        """Kill every rank."""
        self.restart(list(self.actors))


def _left(deadline_s: float) -> float:
    return max(0.1, deadline_s - time.monotonic())
