"""The bandwidth preflight as a Ray job on the head: a TCP ring, then an all-reduce sweep.

``python -m toolkit.preflight.bandwidth_job OPTIONS_JSON`` prints progress lines and,
last, one line ``rtk-bandwidth: {...}`` with every measurement (``run_bandwidth`` in
the runner submits it and reads that line). Pairs that fall below the thresholds are
measured again, up to ``retries`` times, before they count as failed; the best
attempt is kept, so one unlucky second does not fail a node.

The ring runs one pair at a time: parallel tests would share CPUs and switch ports
and measure each other. The all-reduce uses one rank per GPU (NCCL) or, on nodes
without GPUs, one rank per node (gloo); on a node, every rank sees all of the node's
GPUs (as Ray Train arranges), so NCCL may use NVLink and P2P between them.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import ray

from toolkit.preflight import bandwidth
from toolkit.preflight.bandwidth import PROGRESS_PREFIX, RESULT_PREFIX
from toolkit.preflight.checks import Thresholds, slow_pairs
from toolkit.preflight.ray_ranks import (
    CALL_TIMEOUT_S,
    RankGroup,
    alive_nodes,
    error_text,
    gpu_count,
    pinned,
    start_sweeps,
)


@ray.remote(num_cpus=0, max_restarts=0)
class Peer:
    """One node's end of the TCP tests."""

    def __init__(self) -> None:
        self.sink: bandwidth.TcpSink | None = None

    def listen(self) -> int:
        """Start the receiver; its port."""
        self.sink = self.sink or bandwidth.TcpSink()
        return self.sink.port

    def send(self, host: str, port: int, duration_s: float) -> dict[str, Any]:
        """Send to another node's receiver for ``duration_s``."""
        return bandwidth.tcp_send(host, port, duration_s)


def _say(line: str) -> None:
    print(f"{PROGRESS_PREFIX}{line}", flush=True)


def measure_tcp(
    nodes: dict[str, dict[str, Any]], order: list[str], options: dict[str, Any]
) -> list[dict[str, Any]]:
    """The ring, then the retries of pairs below the thresholds."""
    names = [n for n in order if n in nodes]
    pairs = bandwidth.ring_pairs(names)
    if not pairs:
        return []
    peers = {n: Peer.options(scheduling_strategy=pinned(nodes[n])).remote() for n in names}  # type: ignore[attr-defined]
    ports = {n: ray.get(p.listen.remote(), timeout=CALL_TIMEOUT_S) for n, p in peers.items()}
    duration_s = float(options["duration_s"])

    def one(src: str, dst: str, attempt: int) -> dict[str, Any]:
        host = nodes[dst]["NodeManagerAddress"]
        ref = peers[src].send.remote(host, ports[dst], duration_s)
        result: dict[str, Any] = ray.get(ref, timeout=CALL_TIMEOUT_S)
        shown = f"{result['gbit_s']:.2f} Gbit/s" if "gbit_s" in result else result["error"]
        _say(f"tcp {src} -> {dst}: {shown}" + (f" (try {attempt})" if attempt > 1 else ""))
        return result

    results = [{"src": s, "dst": d, "attempts": 1, **one(s, d, 1)} for s, d in pairs]
    thresholds = Thresholds(**options["thresholds"])
    for _ in range(int(options["retries"])):
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
    for peer in peers.values():
        ray.kill(peer)
    return results


def measure_allreduce(
    nodes: dict[str, dict[str, Any]], order: list[str], options: dict[str, Any]
) -> dict[str, Any]:
    """All-reduce sweep over every GPU (NCCL), or every node (gloo) without GPUs."""
    names = [n for n in order if n in nodes]
    gpus = {n: gpu_count(nodes[n]) for n in names}
    use_gpus = all(count > 0 for count in gpus.values())
    counts = [(n, gpus[n] if use_gpus else 1) for n in names]
    group = RankGroup.place(nodes, counts, use_gpus, options["sizes_bytes"])
    world = len(group.ranks)
    result: dict[str, Any] = {"backend": group.backend, "ranks": world}
    if world < 2:
        group.kill()
        result["error"] = "fewer than 2 ranks: nothing to reduce across"
        return result
    try:
        (started,) = start_sweeps([group], CALL_TIMEOUT_S)
        if isinstance(started, str):
            raise RuntimeError(started)
        sweeps = ray.get(started, timeout=CALL_TIMEOUT_S)
        result["sizes"] = sweeps[0]
        for size in sweeps[0]:
            _say(
                f"all-reduce {size['bytes'] / 2**20:g} MiB over {world} ranks: "
                f"algbw {size['algbw_gb_s']:.3f} GB/s, busbw {size['busbw_gb_s']:.3f} GB/s"
            )
    except Exception as e:  # noqa: BLE001 - any failure is the measurement's result
        result["error"] = error_text(e)
        _say(f"all-reduce failed: {result['error']}")
    finally:
        group.kill()
    return result


def main(options: dict[str, Any]) -> dict[str, Any]:
    """Measure; the result dict that ``bandwidth_checks`` grades."""
    ray.init(logging_level=logging.ERROR)
    order = list(options["nodes"])
    nodes = alive_nodes(order)
    result: dict[str, Any] = {
        "nodes": [n for n in order if n in nodes],
        "missing": [n for n in order if n not in nodes],
    }
    result["tcp"] = measure_tcp(nodes, order, options)
    attempts = 0
    while True:
        attempts += 1
        result["allreduce"] = measure_allreduce(nodes, order, options)
        failed = "error" in result["allreduce"] and result["allreduce"]["ranks"] >= 2
        if not failed or attempts > min(1, int(options["retries"])):
            break
    result["allreduce"]["attempts"] = attempts
    return result


if __name__ == "__main__":
    outcome = main(json.loads(sys.argv[1]))
    print(RESULT_PREFIX + json.dumps(outcome), flush=True)
