"""The bandwidth preflight as a Ray job on the head: a TCP ring, then an all-reduce sweep.

``python -m toolkit.preflight.bandwidth.job OPTIONS_JSON`` prints progress lines and,
last, one line ``rtk-bandwidth: {...}`` with every measurement (``run_bandwidth`` in
the runner submits it and reads that line). Pairs that fall below the thresholds are
measured again, up to ``retries`` times, before they count as failed; the best
attempt is kept, so one unlucky second does not fail a node.

The ring runs one pair at a time: parallel tests would share CPUs and switch ports
and measure each other. The all-reduce uses one rank per GPU (NCCL) or, on nodes
without GPUs, one rank per node (gloo); on a node, every rank sees all of the node's
GPUs (as Ray Train arranges), so NCCL may use NVLink and P2P between them. Its sizes
are the options' ``sizes_bytes``, or by backend (``measure.default_sizes``).

When a pair is still slow after its retries, or the all-reduce fails or falls below
its floor, the job localises (``toolkit.preflight.localise.find``): rounds of tests on
disjoint groups at once (``probes``) until the node or link is named. What
it found goes in the result's ``localise`` section, per test kind (``LocaliseSection``).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

import ray

from toolkit.preflight.bandwidth import localise as bl
from toolkit.preflight.bandwidth import measure
from toolkit.preflight.bandwidth.job_options import BandwidthJobOptions
from toolkit.preflight.bandwidth.job_result import AllreduceResult, BandwidthResult, TcpPair
from toolkit.preflight.bandwidth.localise_section import LocaliseSection
from toolkit.preflight.bandwidth.measure import PROGRESS_PREFIX, RESULT_PREFIX
from toolkit.preflight.bandwidth.probes import AllreduceProbe, Peer, TcpPeers, TcpProbe, sent
from toolkit.preflight.checks import Thresholds, slow_pairs
from toolkit.preflight.load.job_result import SweepPoint
from toolkit.preflight.localise.find import localise
from toolkit.preflight.ray_ranks import CALL_TIMEOUT_S, RayNode, alive_nodes, pinned
from toolkit.preflight.ray_ranks import error_text as short_error


def _say(line: str) -> None:
    print(f"{PROGRESS_PREFIX}{line}", flush=True)


def measure_tcp(
    nodes: Mapping[str, RayNode], order: list[str], options: BandwidthJobOptions
) -> tuple[list[TcpPair], LocaliseSection | None]:
    """The ring, the retries of pairs below the thresholds, then localisation if any stayed."""
    names = [n for n in order if n in nodes]
    pairs = measure.ring_pairs(names)
    if not pairs:
        return [], None
    actors = {n: Peer.options(scheduling_strategy=pinned(nodes[n])).remote() for n in names}  # type: ignore[attr-defined]
    try:
        ports = {n: ray.get(p.listen.remote(), timeout=CALL_TIMEOUT_S) for n, p in actors.items()}
        peers = TcpPeers(actors, ports, {n: nodes[n].address for n in names})
        duration_s, thresholds = options.duration_s, options.thresholds
        results = _ring(peers, pairs, duration_s, thresholds, options.retries)
        if not slow_pairs(results, thresholds):
            return results, None
        probe = TcpProbe(peers, duration_s, _say)
        found = _localise(
            "tcp",
            lambda: bl.localisation_section(
                localise(
                    names,
                    probe,
                    bl.tcp_verdict(thresholds, results),
                    bl.tcp_measured(results, thresholds),
                    bl.OPTIONS,
                ),
                "Gbit/s",
            ),
        )
        return results, replace(found, pairs=tuple(probe.tests))
    finally:
        for actor in actors.values():
            ray.kill(actor)


def _ring(
    peers: TcpPeers,
    pairs: list[tuple[str, str]],
    duration_s: float,
    thresholds: Thresholds,
    retries: int,
) -> list[TcpPair]:
    def one(src: str, dst: str, attempt: int) -> TcpPair:
        ref = peers.send(src, dst, duration_s)
        try:
            answer = sent(ray.get(ref, timeout=CALL_TIMEOUT_S))
        except Exception as e:  # noqa: BLE001 - a failed test is a result
            answer = sent(e)
        pair = TcpPair.measured(src, dst, answer, attempt)
        shown = f"{pair.gbit_s:.2f} Gbit/s" if pair.gbit_s is not None else pair.error
        _say(f"tcp {src} -> {dst}: {shown}" + (f" (try {attempt})" if attempt > 1 else ""))
        return pair

    results = [one(s, d, 1) for s, d in pairs]
    for _ in range(retries):
        again = slow_pairs(results, thresholds)
        if not again:
            break
        for i, entry in enumerate(results):
            if entry.key not in again:
                continue
            retry = one(entry.src, entry.dst, entry.attempts + 1)
            best = _rate(retry) > _rate(entry)
            results[i] = retry if best else replace(entry, attempts=retry.attempts)
    return results


def _rate(pair: TcpPair) -> float:
    return -1.0 if pair.gbit_s is None else pair.gbit_s


def measure_allreduce(
    nodes: Mapping[str, RayNode], order: list[str], options: BandwidthJobOptions
) -> tuple[AllreduceResult, LocaliseSection | None]:
    """All-reduce sweep over every GPU (NCCL), or every node (gloo); localise if it is bad."""
    names = [n for n in order if n in nodes]
    gpus = {n: nodes[n].gpu_count for n in names}
    use_gpus = bool(names) and all(count > 0 for count in gpus.values())
    per_node = {n: gpus[n] if use_gpus else 1 for n in names}
    backend = "nccl" if use_gpus else "gloo"
    sizes = list(options.sizes_bytes or measure.default_sizes(backend))
    thresholds = options.thresholds
    expected = options.busbw_expected_min_gb_s
    floor_gb_s = bl.allreduce_floor_gb_s(thresholds, expected)
    world = sum(per_node.values())
    result = AllreduceResult(backend, world, floor_gb_s, expected or None)
    if world < 2:
        return replace(result, error="fewer than 2 ranks: nothing to reduce across"), None
    probe = AllreduceProbe(nodes, per_node, use_gpus, max(sizes), _say)
    try:
        attempts = 0
        while True:
            attempts += 1
            sweep = _sweep(probe, names, sizes)
            if isinstance(sweep, str):
                result = replace(result, error=sweep, attempts=attempts)
                _say(f"all-reduce failed: {sweep}")
                probe.restart(names)
            else:
                result = replace(result, error=None, sizes=sweep, attempts=attempts)
            if result.error is None or attempts > min(1, options.retries):
                break
        if not bl.allreduce_is_bad(result, floor_gb_s):
            return result, None
        given = [(tuple(names), bl.allreduce_measured(result))]
        verdict = bl.allreduce_verdict(floor_gb_s)
        found = _localise(
            "allreduce",
            lambda: bl.localisation_section(
                localise(names, probe, verdict, given, bl.OPTIONS), "GB/s busbw"
            ),
        )
        return result, replace(found, groups=tuple(probe.tests))
    finally:
        probe.close()


def _sweep(
    probe: AllreduceProbe, names: list[str], sizes: list[int]
) -> tuple[SweepPoint, ...] | str:
    """The sweep over every rank, or why it failed."""
    deadline_s = time.monotonic() + CALL_TIMEOUT_S
    try:
        found = probe.finish(probe.launch(names, deadline_s, sizes), deadline_s)
    except Exception as e:  # noqa: BLE001 - any failure is the measurement's result
        return short_error(e)
    if not isinstance(found, tuple):
        return found.error
    world = sum(probe.ranks_per_node.values())
    for point in found:
        _say(
            f"all-reduce {point.size_bytes / 2**20:g} MiB over {world} ranks: "
            f"algbw {point.algbw_gb_s:.3f} GB/s, busbw {point.busbw_gb_s:.3f} GB/s"
        )
    return found


def _localise(kind: str, run: Callable[[], LocaliseSection]) -> LocaliseSection:
    """Run a localisation; what it found, or the error that stopped it (its tests not yet in)."""
    _say(f"localise {kind}: searching for the node or link")
    try:
        section = run()
    except Exception as e:  # noqa: BLE001 - the measurements stand without it
        section = LocaliseSection(error=short_error(e))
        _say(f"localise {kind} stopped: {section.error}")
    else:
        for line in section.describe:
            _say(f"localise {kind}: {line.strip()}")
    return section


def main(options: BandwidthJobOptions) -> BandwidthResult:
    """Measure; the result that ``bandwidth_checks`` grades."""
    ray.init(logging_level=logging.ERROR)
    order = list(options.nodes)
    nodes = alive_nodes(order)
    localised: dict[str, LocaliseSection] = {}
    tcp, found = measure_tcp(nodes, order, options)
    if found is not None:
        localised["tcp"] = found
    reduce, found = measure_allreduce(nodes, order, options)
    if found is not None:
        localised["allreduce"] = found
    return BandwidthResult(
        nodes=tuple(n for n in order if n in nodes),
        missing=tuple(n for n in order if n not in nodes),
        tcp=tuple(tcp),
        allreduce=reduce,
        localise=localised,
    )


if __name__ == "__main__":
    outcome = main(BandwidthJobOptions.from_json(json.loads(sys.argv[1])))
    print(RESULT_PREFIX + json.dumps(outcome.to_json()), flush=True)
