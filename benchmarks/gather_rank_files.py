"""The end of every run: the ranks' files asked of every node, at more nodes than the sandbox has.

``toolkit.telemetry.rank_files.gather_rank_files`` runs one Ray task on each node
other than the head when a run ends (telemetry on or off). A node's first task waits
for a worker process to start, so how many nodes are asked at once sets the cost. This
starts a real Ray cluster of ``--nodes`` raylets on this machine (``ray.cluster_utils``;
they share one filesystem, so each node answers "nothing longer", which is exactly
the shared-filesystem case where the whole gather is overhead) and times:

- rtk: today's ``gather_rank_files`` (``GATHER_IN_FLIGHT`` tasks at once, answers
  written as they come);
- previous: the loop it replaced, 8 nodes at a time, each a blocking ``ray.get``.

Each measurement gets a fresh cluster (no worker left warm from the other), and the
order alternates between repeats. Here every raylet and every worker it starts share
this machine's cores, so the worker starts that separate machines make side by side
queue for the same CPUs: measured as is, the window cannot show. ``--task-latency-s``
models a node's own time to answer (its worker start, on its own CPUs) as a sleep in
each node's task, which costs no CPU here; with ``--warm`` an untimed gather first
starts a worker on every node, so that the timed one measures the sleeps and how many
of them Ray runs at once, not this machine's worker starts.

    python benchmarks/gather_rank_files.py [--nodes 16] [--repeats 2]
        [--task-latency-s 1.5] [--warm]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from toolkit.rundir import RunDir
from toolkit.telemetry import rank_files

PREVIOUS_PARALLEL = 8


def previous_gather(run_dir: str) -> list[str]:
    """The loop before: 8 nodes at a time, each answer awaited by its own thread."""
    head_id = ray.get_runtime_context().get_node_id()
    nodes = [n for n in ray.nodes() if n.get("Alive") and n["NodeID"] != head_id]
    have = rank_files.rank_file_sizes(run_dir)

    def ask(node: dict[str, Any]) -> dict[str, bytes]:
        where = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        task = rank_files._read_rank_files.options(scheduling_strategy=where)
        found: dict[str, bytes] = ray.get(task.remote(run_dir, have), timeout=60)
        return found

    written: list[str] = []
    with ThreadPoolExecutor(min(PREVIOUS_PARALLEL, len(nodes))) as pool:
        for found in pool.map(ask, nodes):
            written += rank_files.keep_longer(run_dir, found)
    return written


def slowed_read(latency_s: float) -> Any:
    """The per-node task, answering ``latency_s`` later (a sleep: no CPU taken here)."""

    @ray.remote(num_cpus=0)
    def read(run_dir: str, have: dict[str, int]) -> dict[str, bytes]:
        time.sleep(latency_s)
        return rank_files.rank_files_longer(run_dir, have)

    return read


def timed_on_fresh_cluster(
    nodes: int, run_dir: str, gather: Callable[[str], list[str]], warm: bool
) -> float:
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        if warm:
            gather(run_dir)
        started = time.perf_counter()
        written = gather(run_dir)
        took_s = time.perf_counter() - started
        assert written == [], written  # one filesystem: nothing is longer anywhere
        return took_s
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--task-latency-s", type=float, default=0.0)
    parser.add_argument("--warm", action="store_true")
    args = parser.parse_args()
    if args.task_latency_s > 0:  # both loops look the task up in the module at call time
        rank_files._read_rank_files = slowed_read(args.task_latency_s)
    with tempfile.TemporaryDirectory(prefix="rtk-gather-") as tmp:
        run = RunDir(Path(tmp) / "run")
        for rank in range(8 * args.nodes):  # 8 ranks a node, each with its markers
            run.marker(rank).parent.mkdir(parents=True, exist_ok=True)
            run.marker(rank).write_text('{"event": "run_start"}\n' * 100)
        tools: dict[str, Callable[[str], list[str]]] = {
            "rtk": rank_files.gather_rank_files,
            "previous": previous_gather,
        }
        times: dict[str, list[float]] = {name: [] for name in tools}
        for repeat in range(args.repeats):
            order = list(tools) if repeat % 2 == 0 else list(reversed(tools))
            for name in order:
                took_s = timed_on_fresh_cluster(args.nodes, str(run.root), tools[name], args.warm)
                times[name].append(took_s)
                print(f"repeat {repeat + 1}: {name:8s} {took_s:6.2f} s", flush=True)
    rtk, previous = (statistics.mean(times[n]) for n in ("rtk", "previous"))
    print(
        f"{args.nodes} nodes ({args.nodes - 1} asked, task latency {args.task_latency_s:g} s"
        f"{', warm' if args.warm else ''}), "
        f"mean of {args.repeats}: "
        f"rtk {rtk:.2f} s, previous {previous:.2f} s, rtk/previous {rtk / previous:.2f}"
    )


if __name__ == "__main__":
    main()
