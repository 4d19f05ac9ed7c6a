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
it found goes in the result's ``localise`` section, per test kind.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import ray

from toolkit.preflight.bandwidth import localise as bl
from toolkit.preflight.bandwidth import measure
from toolkit.preflight.bandwidth.measure import PROGRESS_PREFIX, RESULT_PREFIX
from toolkit.preflight.bandwidth.probes import AllreduceProbe, Peer, TcpProbe
from toolkit.preflight.checks import Thresholds, slow_pairs
from toolkit.preflight.localise.find import localise
from toolkit.preflight.ray_ranks import CALL_TIMEOUT_S, alive_nodes, pinned
from toolkit.preflight.ray_ranks import error_text as short_error


def _say(line: str) -> None:
    print(f"{PROGRESS_PREFIX}{line}", flush=True)


def measure_tcp(
    nodes: dict[str, dict[str, Any]], order: list[str], options: dict[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The ring, the retries of pairs below the thresholds, then localisation if any stayed."""
    names = [n for n in order if n in nodes]
    pairs = measure.ring_pairs(names)
    if not pairs:
        return [], None
    peers = {n: Peer.options(scheduling_strategy=pinned(nodes[n])).remote() for n in names}  # type: ignore[attr-defined]
    try:
        ports = {n: ray.get(p.listen.remote(), timeout=CALL_TIMEOUT_S) for n, p in peers.items()}
        hosts = {n: str(nodes[n]["NodeManagerAddress"]) for n in names}
        duration_s = float(options["duration_s"])
        thresholds = Thresholds(**options["thresholds"])
        results = _ring(peers, ports, hosts, pairs, duration_s, thresholds, int(options["retries"]))
        if not slow_pairs(results, thresholds):
            return results, None
        probe = TcpProbe(peers, ports, hosts, duration_s, _say)
        return results, _localise(
            "tcp",
            lambda: bl.localisation_json(
                localise(
                    names,
                    probe,
                    bl.tcp_verdict(thresholds, results),
                    bl.tcp_measured(results, thresholds),
                    bl.OPTIONS,
                ),
                "Gbit/s",
            ),
            probe.tests,
            "pairs",
        )
    finally:
        for peer in peers.values():
            ray.kill(peer)


def _ring(
    peers: dict[str, Any],
    ports: dict[str, int],
    hosts: dict[str, str],
    pairs: list[tuple[str, str]],
    duration_s: float,
    thresholds: Thresholds,
    retries: int,
) -> list[dict[str, Any]]:
    def one(src: str, dst: str, attempt: int) -> dict[str, Any]:
        ref = peers[src].send.remote(hosts[dst], ports[dst], duration_s)
        try:
            result: dict[str, Any] = ray.get(ref, timeout=CALL_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - a failed test is a result
            result = {"error": short_error(e)}
        shown = f"{result['gbit_s']:.2f} Gbit/s" if "gbit_s" in result else result["error"]
        _say(f"tcp {src} -> {dst}: {shown}" + (f" (try {attempt})" if attempt > 1 else ""))
        return result

    results = [{"src": s, "dst": d, "attempts": 1, **one(s, d, 1)} for s, d in pairs]
    for _ in range(retries):
        again = slow_pairs(results, thresholds)
        if not again:
            break
        for entry in results:
            if (entry["src"], entry["dst"]) not in again:
                continue
            entry["attempts"] += 1
            retry = one(entry["src"], entry["dst"], entry["attempts"])
            if retry.get("gbit_s", -1.0) > entry.get("gbit_s", -1.0):
                entry.pop("error", None)
                entry.update(retry)
    return results


def measure_allreduce(
    nodes: dict[str, dict[str, Any]], order: list[str], options: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """All-reduce sweep over every GPU (NCCL), or every node (gloo); localise if it is bad."""
    names = [n for n in order if n in nodes]
    gpus = {n: int(nodes[n].get("Resources", {}).get("GPU", 0)) for n in names}
    use_gpus = bool(names) and all(count > 0 for count in gpus.values())
    per_node = {n: gpus[n] if use_gpus else 1 for n in names}
    backend = "nccl" if use_gpus else "gloo"
    sizes = list(options.get("sizes_bytes") or measure.default_sizes(backend))
    thresholds = Thresholds(**options["thresholds"])
    expected = options.get("busbw_expected_min_gb_s")
    floor_gb_s = bl.allreduce_floor_gb_s(thresholds, expected)
    world = sum(per_node.values())
    result: dict[str, Any] = {"backend": backend, "ranks": world, "floor_gb_s": floor_gb_s}
    if expected:
        result["expected_min_gb_s"] = float(expected)
    if world < 2:
        result["error"] = "fewer than 2 ranks: nothing to reduce across"
        return result, None
    probe = AllreduceProbe(nodes, per_node, use_gpus, max(sizes), _say)
    try:
        attempts = 0
        while True:
            attempts += 1
            result.pop("error", None)
            sweep = _sweep(probe, names, sizes)
            if isinstance(sweep, str):
                result["error"] = sweep
                _say(f"all-reduce failed: {sweep}")
                probe.restart(names)
            else:
                result["sizes"] = sweep
                result["plateau"] = measure.plateau(sweep)
            if "error" not in result or attempts > min(1, int(options["retries"])):
                break
        result["attempts"] = attempts
        if not bl.allreduce_is_bad(result, floor_gb_s):
            return result, None
        given = [(tuple(names), bl.allreduce_measured(result))]
        verdict = bl.allreduce_verdict(floor_gb_s)
        return result, _localise(
            "allreduce",
            lambda: bl.localisation_json(
                localise(names, probe, verdict, given, bl.OPTIONS), "GB/s busbw"
            ),
            probe.tests,
            "groups",
        )
    finally:
        probe.close()


def _sweep(
    probe: AllreduceProbe, names: list[str], sizes: list[int]
) -> list[dict[str, float]] | str:
    """The sweep over every rank, or why it failed."""
    deadline_s = time.monotonic() + CALL_TIMEOUT_S
    try:
        found = probe.finish(probe.launch(names, deadline_s, sizes), deadline_s)
    except Exception as e:  # noqa: BLE001 - any failure is the measurement's result
        return short_error(e)
    if not isinstance(found, list):
        return found.error
    world = sum(probe.ranks_per_node.values())
    for size in found:
        _say(
            f"all-reduce {size['bytes'] / 2**20:g} MiB over {world} ranks: "
            f"algbw {size['algbw_gb_s']:.3f} GB/s, busbw {size['busbw_gb_s']:.3f} GB/s"
        )
    return found


def _localise(
    kind: str, run: Callable[[], dict[str, Any]], tests: list[dict[str, Any]], tests_key: str
) -> dict[str, Any]:
    """Run a localisation; its JSON section with the probe's tests, or the error that stopped it."""
    _say(f"localise {kind}: searching for the node or link")
    try:
        section: dict[str, Any] = run()
    except Exception as e:  # noqa: BLE001 - the measurements stand without it
        section = {"error": short_error(e)}
        _say(f"localise {kind} stopped: {section['error']}")
    else:
        for line in section["describe"]:
            _say(f"localise {kind}: {line.strip()}")
    section[tests_key] = tests
    return section


def main(options: dict[str, Any]) -> dict[str, Any]:
    """Measure; the result dict that ``bandwidth_checks`` grades."""
    ray.init(logging_level=logging.ERROR)
    order = list(options["nodes"])
    nodes = alive_nodes(order)
    result: dict[str, Any] = {
        "nodes": [n for n in order if n in nodes],
        "missing": [n for n in order if n not in nodes],
        "localise": {},
    }
    result["tcp"], found = measure_tcp(nodes, order, options)
    if found is not None:
        result["localise"]["tcp"] = found
    result["allreduce"], found = measure_allreduce(nodes, order, options)
    if found is not None:
        result["localise"]["allreduce"] = found
    return result


if __name__ == "__main__":
    outcome = main(json.loads(sys.argv[1]))
    print(RESULT_PREFIX + json.dumps(outcome), flush=True)
