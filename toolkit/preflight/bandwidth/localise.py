"""The pure parts of localising a bad bandwidth result: what a round tests, and how it is judged.

The bandwidth job (``job``) measures a TCP ring one pair at a time and one
all-reduce over every rank. When a pair stays slow or fails, or the all-reduce does,
it hands the search to ``toolkit.preflight.localise.find`` with a probe that runs tests on
disjoint groups of nodes at once (``probes``). What those probes and the
search share is here, free of Ray, so it is tested without a cluster:

- A TCP test of a group is a ring inside it, every stream at once: for a pair ``(a,
  b)``, ``a`` sends to ``b`` while ``b`` sends to ``a``. Each node sends once and
  receives once, so a node slow in either direction makes every group with it slow,
  which is what the search assumes of a bad node. The group's value is its slowest
  stream; a stream that failed fails the group.
- What the serial ring already showed starts the search: the slow pairs as bad groups,
  and each node whose sending and receiving were both good as a one-node group with
  the lower of its two rates (known good: a partner for the suspects). A good ring
  pair is not given as a pair: ``a -> b`` good says nothing of ``b``'s sending, and
  a node slow only one way would be cleared by it.
- The verdicts: a TCP group is bad below the fraction of the median of the groups
  measured in the same round (the ring's rule, among tests measured alike: parallel
  streams share switch ports, and CPUs on small hosts, so they would be unfair
  against the serial ring's median), or below a floor: the absolute threshold, or a
  quarter of the ring's (which judges a group measured without peers). An all-reduce
  group likewise, on busbw against its threshold or the hardware's.
- ``localisation_section`` is what was found, as the job's result carries it
  (``localise_section.LocaliseSection``), which
  ``toolkit.preflight.localise.culprit_checks`` grades.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from toolkit.preflight.bandwidth.job_result import AllreduceResult, TcpPair
from toolkit.preflight.bandwidth.localise_section import (
    LocaliseSection,
    ShownCulprit,
    ShownFlake,
    ShownReading,
)
from toolkit.preflight.bandwidth.measure import TcpSendResult
from toolkit.preflight.checks import Thresholds, slow_pairs, tcp_floor_gbit_s
from toolkit.preflight.localise.find import (
    Failed,
    Group,
    Localisation,
    LocaliseOptions,
    ProbeResult,
    Reading,
    Verdict,
)

RING_SHARE = 0.25  # of the ring's floor: the least a pair measured in parallel may reach
ALLREDUCE_FRACTION = 0.5  # a group's busbw below half its peers' median is bad
OPTIONS = LocaliseOptions(retries=1, fanout=2, references=True, seed=None)
Stream = tuple[str, str]  # (src, dst): src sends to dst


def group_streams(group: Sequence[str]) -> list[Stream]:
    """The streams of one group's TCP test: a ring inside it, both ways for a pair."""
    return [(group[i], group[(i + 1) % len(group)]) for i in range(len(group))]


def round_streams(groups: Sequence[Sequence[str]]) -> list[tuple[int, Stream]]:
    """Every stream of a round, with the index of its group; each node sends once."""
    return [(i, stream) for i, group in enumerate(groups) for stream in group_streams(group)]


def tcp_group_results(
    count: int, streams: Sequence[tuple[int, Stream]], results: Sequence[TcpSendResult]
) -> list[ProbeResult]:
    """Each of ``count`` groups' result: its slowest stream's Gbit/s, or a failure.

    ``results`` are ``measure.tcp_send``'s answers, one per stream, in order.
    """
    rates: list[list[float]] = [[] for _ in range(count)]
    errors: list[list[str]] = [[] for _ in range(count)]
    for (index, (src, dst)), result in zip(streams, results, strict=True):
        if result.gbit_s is not None:
            rates[index].append(result.gbit_s)
        else:
            errors[index].append(f"{src}->{dst}: {result.error or 'no answer'}")
    found: list[ProbeResult] = []
    for own_rates, own_errors in zip(rates, errors, strict=True):
        if own_errors:
            found.append(Failed("; ".join(own_errors)))
        elif own_rates:
            found.append(min(own_rates))
        else:
            found.append(Failed("no stream measured"))
    return found


def tcp_verdict(t: Thresholds, tcp: Sequence[TcpPair] = ()) -> Verdict:
    """Bad below a floor, or below ``tcp_min_fraction`` of the round's median.

    The floor is ``tcp_min_gbit_s``, or a share (``RING_SHARE``) of the floor the ring
    ``tcp`` set (half its median): parallel streams share switch ports and, on small
    hosts, CPUs, so they are judged against each other first; the floor judges a group
    measured without peers and catches a round where everything is far too slow.
    """
    ring_floor = RING_SHARE * tcp_floor_gbit_s(tcp, t) if tcp else 0.0
    floor = max(t.tcp_min_gbit_s, ring_floor)
    return Verdict(floor=floor or None, fraction=t.tcp_min_fraction or None)


def tcp_measured(
    tcp: Sequence[TcpPair], t: Thresholds
) -> list[tuple[tuple[str, ...], ProbeResult]]:
    """What the ring showed, as localisation's starting results (see the module doc).

    Slow or failed pairs as ``(src, dst)`` groups; each node whose pair out and pair
    in were both good as ``(node,)`` with the lower rate.
    """
    slow = slow_pairs(tcp, t)
    measured: list[tuple[tuple[str, ...], ProbeResult]] = []
    rates: dict[str, list[float]] = {}
    suspects: set[str] = set()
    for r in tcp:
        if r.key in slow or r.gbit_s is None:
            suspects |= {r.src, r.dst}
            value: ProbeResult = r.gbit_s if r.gbit_s is not None else Failed(str(r.error))
            measured.append((r.key, value))
        else:
            for node in r.key:
                rates.setdefault(node, []).append(r.gbit_s)
    measured += [((node,), min(own)) for node, own in rates.items() if node not in suspects]
    return measured


def allreduce_floor_gb_s(t: Thresholds, expected_min_gb_s: float | None) -> float:
    """The busbw below which the all-reduce fails: the threshold or the hardware's."""
    return max(t.busbw_min_gb_s, expected_min_gb_s or 0.0)


def allreduce_is_bad(reduce: AllreduceResult, floor_gb_s: float) -> bool:
    """Whether the all-reduce over every rank failed, or its busbw fell below the floor."""
    if reduce.ranks < 2:
        return False
    largest = reduce.largest
    return reduce.error is not None or largest is None or largest.busbw_gb_s < floor_gb_s


def allreduce_measured(reduce: AllreduceResult) -> ProbeResult:
    """The all-reduce over every node as localisation's starting result."""
    largest = reduce.largest
    if reduce.error is not None or largest is None:
        return Failed(reduce.error or "no sizes measured")
    return largest.busbw_gb_s


def allreduce_verdict(floor_gb_s: float) -> Verdict:
    """Bad below the floor (when one is set) or below half the round's median busbw."""
    return Verdict(floor=floor_gb_s or None, fraction=ALLREDUCE_FRACTION)


def _shown(r: Reading) -> ShownReading:
    value = None if r.value is None else round(r.value, 4)
    return ShownReading(r.round, r.group, r.role, value, r.bad, r.error)


def localisation_section(found: Localisation, unit: str) -> LocaliseSection:
    """The ``localise`` section of one test kind in the job's result (its tests not yet in).

    Culprits carry the readings that convicted them and ``summary``, the words a
    check shows: how often tests with it were slow, and its values against the rest.
    """
    return LocaliseSection(
        conclusion=found.conclusion,
        unit=unit,
        rounds=found.rounds_used,
        probes=found.probes_run,
        node_count=len(found.nodes),
        culprits=tuple(
            ShownCulprit(
                c.kind,
                c.nodes,
                culprit_summary(found, c.nodes, unit),
                tuple(_shown(r) for r in c.evidence),
            )
            for c in found.culprits
        ),
        flakes=tuple(
            ShownFlake(f.nodes, tuple(_shown(r) for r in f.evidence)) for f in found.flaky
        ),
        unresolved=tuple(found.unresolved),
        describe=tuple(found.describe()),
        readings=tuple(_shown(r) for r in found.readings),
    )


def culprit_summary(found: Localisation, nodes: Group, unit: str) -> str:
    """``slow in 3 of 3 tests with it, fine without it: 0.49 vs 9.8 Gbit/s``.

    "With it": the readings holding every node of ``nodes`` (a node, or both ends of a
    link); "without": the good readings holding none of them.
    """
    ends = set(nodes)
    judged = [r for r in found.readings if r.bad is not None]
    with_it = [r for r in judged if ends <= set(r.group)]
    bad = [r for r in with_it if r.bad]
    failed = sum(1 for r in bad if r.value is None)
    how = "failed" if bad and failed == len(bad) else "slow"
    if len(nodes) == 1:
        fine = [r for r in judged if not r.bad and not ends & set(r.group)]
        words = f"{how} in {len(bad)} of {len(with_it)} tests with it"
        apart = "without it"
    else:  # a link: each end was good with others
        fine = [r for r in judged if not r.bad and len(ends & set(r.group)) == 1]
        words = f"{how} in {len(bad)} of {len(with_it)} tests of the pair"
        apart = "apart"
    if failed and how == "slow":
        words += f" ({failed} failed)"
    bad_values = [r.value for r in bad if r.value is not None]
    fine_values = [r.value for r in fine if r.value is not None]
    if fine_values:
        fine_at = f"{statistics.median(fine_values):.3g} {unit}"
        if bad_values:
            words += f", fine {apart}: {statistics.median(bad_values):.3g} vs {fine_at}"
        else:
            words += f", fine {apart}: {fine_at}"
    return words
