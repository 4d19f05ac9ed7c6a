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
import os
import socket
import sys
from datetime import timedelta
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from toolkit.preflight import bandwidth
from toolkit.preflight.bandwidth import PROGRESS_PREFIX, RESULT_PREFIX
from toolkit.preflight.checks import Thresholds, slow_pairs
from toolkit.ray_resources import host_resource

CALL_TIMEOUT_S = 300.0


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


@ray.remote(num_cpus=0, max_restarts=0)
class Rank:
    """One rank of the all-reduce sweep."""

    def gpu_ids(self) -> list[str]:
        """The GPUs Ray gave this actor."""
        return [str(i) for i in ray.get_gpu_ids()]

    def free_port(self) -> int:
        """A port free on this node now, for the rendezvous."""
        with socket.socket() as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def sweep(
        self,
        rank: int,
        world: int,
        init_method: str,
        visible: str | None,
        local_index: int,
        sizes_bytes: list[int],
    ) -> list[dict[str, float]]:
        """Join the process group and time the all-reduces."""
        if visible is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
        import torch
        import torch.distributed as dist

        gpu = visible is not None
        device = torch.device(f"cuda:{local_index}" if gpu else "cpu")
        if gpu:
            torch.cuda.set_device(device)
        dist.init_process_group(
            "nccl" if gpu else "gloo",
            init_method=init_method,
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=120),
        )
        try:
            return bandwidth.allreduce_sweep(dist, torch, device, sizes_bytes)
        finally:
            dist.destroy_process_group()


def _say(line: str) -> None:
    print(f"{PROGRESS_PREFIX}{line}", flush=True)


def _alive_nodes(names: list[str]) -> dict[str, dict[str, Any]]:
    """Inventory name -> Ray node record, for the named nodes that are alive."""
    found: dict[str, dict[str, Any]] = {}
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        if not node.get("Alive"):
            continue
        for name in names:
            if host_resource(name) in node.get("Resources", {}):
                found[name] = node
    return found


def _pinned(node: dict[str, Any]) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)


def measure_tcp(
    nodes: dict[str, dict[str, Any]], order: list[str], options: dict[str, Any]
) -> list[dict[str, Any]]:
    """The ring, then the retries of pairs below the thresholds."""
    names = [n for n in order if n in nodes]
    pairs = bandwidth.ring_pairs(names)
    if not pairs:
        return []
    peers = {n: Peer.options(scheduling_strategy=_pinned(nodes[n])).remote() for n in names}  # type: ignore[attr-defined]
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
    gpus = {n: int(nodes[n].get("Resources", {}).get("GPU", 0)) for n in names}
    use_gpus = all(count > 0 for count in gpus.values())
    placed: list[tuple[str, Any]] = []
    for name in names:
        for _ in range(gpus[name] if use_gpus else 1):
            actor = Rank.options(  # type: ignore[attr-defined]
                scheduling_strategy=_pinned(nodes[name]), num_gpus=1 if use_gpus else 0
            ).remote()
            placed.append((name, actor))
    world = len(placed)
    result: dict[str, Any] = {"backend": "nccl" if use_gpus else "gloo", "ranks": world}
    if world < 2:
        result["error"] = "fewer than 2 ranks: nothing to reduce across"
        return result
    try:
        ids = ray.get([a.gpu_ids.remote() for _, a in placed], timeout=CALL_TIMEOUT_S)
        visible: dict[str, list[str]] = {}
        for (name, _), own in zip(placed, ids, strict=True):
            visible.setdefault(name, []).extend(own)
        master = nodes[placed[0][0]]["NodeManagerAddress"]
        port = ray.get(placed[0][1].free_port.remote(), timeout=CALL_TIMEOUT_S)
        init = f"tcp://{master}:{port}"
        refs = []
        for rank, ((name, actor), own) in enumerate(zip(placed, ids, strict=True)):
            shown = sorted(visible[name], key=lambda i: (len(i), i))
            index = shown.index(own[0]) if use_gpus else 0
            refs.append(
                actor.sweep.remote(
                    rank,
                    world,
                    init,
                    ",".join(shown) if use_gpus else None,
                    index,
                    list(options["sizes_bytes"]),
                )
            )
        sweeps = ray.get(refs, timeout=CALL_TIMEOUT_S)
        result["sizes"] = sweeps[0]
        for size in sweeps[0]:
            _say(
                f"all-reduce {size['bytes'] / 2**20:g} MiB over {world} ranks: "
                f"algbw {size['algbw_gb_s']:.3f} GB/s, busbw {size['busbw_gb_s']:.3f} GB/s"
            )
    except Exception as e:  # noqa: BLE001 - any failure is the measurement's result
        result["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}"
        _say(f"all-reduce failed: {result['error']}")
    finally:
        for _, actor in placed:
            ray.kill(actor)
    return result


def main(options: dict[str, Any]) -> dict[str, Any]:
    """Measure; the result dict that ``bandwidth_checks`` grades."""
    ray.init(logging_level=logging.ERROR)
    order = list(options["nodes"])
    nodes = _alive_nodes(order)
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
