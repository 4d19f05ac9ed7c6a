"""The per-node preflight as a Ray job on the head: a load test and an intra-node all-reduce.

``python -m toolkit.preflight.load.job OPTIONS_JSON`` tests every alive inventory
node at once, in two phases so that the two tests never share a node's devices:

1. the load test (``node.run_node_load``): one actor per node, pinned to it, that
   holds all of the node's GPUs (so that Ray shows it every GPU, and nothing else of
   Ray's runs on them meanwhile); every node's actor loads torch first, then all
   start their GEMMs together;
2. an all-reduce sweep over the node's own ranks: one rank per GPU with NCCL, or two
   CPU ranks with gloo on a node without GPUs; each node its own process group, with
   its rendezvous on the node's own address, all nodes' groups at once.

It prints progress lines (``rtk load: ``; one per node up to ``PER_NODE_LINES``
nodes, then counts) and, last, ``rtk-load: {json}``: a ``LoadResult``. A node whose
test fails or does not answer within the timeout is a result with its error, never
the end of the job.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import ray

from toolkit.errors import RtkError
from toolkit.json_types import JsonObject
from toolkit.preflight.load.job_options import LoadJobOptions
from toolkit.preflight.load.job_result import (
    PROGRESS_PREFIX,
    RESULT_PREFIX,
    IntraAllReduce,
    LoadResult,
    NodeResult,
    SweepPoint,
)
from toolkit.preflight.load.node import NodeLoad, run_node_load
from toolkit.preflight.ray_ranks import (
    CALL_TIMEOUT_S,
    RankGroup,
    RayNode,
    alive_nodes,
    error_text,
    pinned,
    start_sweeps,
)
from toolkit.rundir.record_base import record_fields

MiB = 1 << 20
CPU_SIZES_BYTES = (MiB, 4 * MiB)
GPU_SIZES_BYTES = (MiB, 16 * MiB, 64 * MiB, 256 * MiB)
CPU_RANKS = 2
PER_NODE_LINES = 8  # above this many nodes, progress is counts, not a line per node
LOAD_TIMEOUT_S = CALL_TIMEOUT_S  # plus the GEMM's duration
POLL_S = 1.0


def _say(line: str) -> None:
    print(f"{PROGRESS_PREFIX}{line}", flush=True)


@ray.remote(num_cpus=0, max_restarts=0)
class NodeLoader:
    """The load test of the node this actor runs on.

    ``ready`` loads torch (seconds on a busy node) before any node starts its GEMM, so
    that ``run`` starts on every node within milliseconds of the others: nodes that
    share anything (a switch, a PDU, or in a sandbox the host's CPUs) are measured
    under the same conditions, and a node slow to start is not measured alone.
    """

    def ready(self) -> bool:
        """Load what the test needs; True when done."""
        with suppress(ImportError):
            import torch

            # Ray limits an actor without CPUs to one thread; the CPU GEMM uses every
            # CPU it may run on, so that a node whose CPUs are busy shows it.
            torch.set_num_threads(len(os.sched_getaffinity(0)))
        return True

    def run(self, precision: str, duration_s: float) -> JsonObject:
        """The load test, as JSON (the driver reads it with ``NodeLoad.from_json``)."""
        return run_node_load(precision, duration_s).to_json()


def intra_shape(node: RayNode) -> tuple[int, bool]:
    """How many ranks a node's own all-reduce has, and whether they are GPU ranks."""
    gpus = node.gpu_count
    return (gpus, True) if gpus > 0 else (CPU_RANKS, False)


@dataclass
class Progress:
    """Progress lines for one phase over ``total`` nodes, bounded at any node count.

    Up to ``PER_NODE_LINES`` nodes, a line per node as it finishes; above, a count at
    each quarter and at the end, naming up to three failed nodes.
    """

    phase: str
    total: int
    say: Callable[[str], None] = _say
    done: int = 0
    failed: list[str] = field(default_factory=list)
    _shown_quarter: int = 0

    def finished(self, node: str, text: str, ok: bool) -> None:
        """``node`` is done; ``text`` says how it went."""
        self.done += 1
        if not ok:
            self.failed.append(node)
        if self.total <= PER_NODE_LINES:
            self.say(f"{self.phase} {node}: {text}")
            return
        quarter = 4 * self.done // self.total
        if quarter > self._shown_quarter:
            self._shown_quarter = quarter
            self.say(self.summary())

    def summary(self) -> str:
        """``gemm: 12/16 nodes done, 1 failed (n3)``."""
        text = f"{self.phase}: {self.done}/{self.total} nodes done"
        if self.failed:
            named = ", ".join(self.failed[:3]) + (", ..." if len(self.failed) > 3 else "")
            text += f", {len(self.failed)} failed ({named})"
        return text


def gather(
    refs: Mapping[str, Sequence[Any]],
    timeout_s: float,
    progress: Progress,
    describe: Callable[[list[Any]], str],
) -> dict[str, list[Any] | str]:
    """Wait for every node's refs; per node their values, or the error (a string).

    A node is done when all its refs are, or at its first error; a node not done
    within ``timeout_s`` gets a timeout error and its refs are cancelled.
    """
    owner = {ref: node for node, node_refs in refs.items() for ref in node_refs}
    values: dict[str, dict[Any, Any]] = {node: {} for node in refs}
    out: dict[str, list[Any] | str] = {}
    pending = list(owner)
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        wait_s = min(POLL_S, max(0.0, deadline - time.monotonic()))
        ready, pending = ray.wait(pending, num_returns=len(pending), timeout=wait_s)
        for ref in ready:
            node = owner[ref]
            if node in out:
                continue
            try:
                values[node][ref] = ray.get(ref, timeout=CALL_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - a node's failure is its result
                out[node] = error_text(e)
                progress.finished(node, f"failed: {out[node]}", ok=False)
                continue
            if len(values[node]) == len(refs[node]):
                got = [values[node][r] for r in refs[node]]
                out[node] = got
                progress.finished(node, describe(got), ok=True)
        pending = [ref for ref in pending if owner[ref] not in out]
    for ref in pending:
        with suppress(Exception):
            ray.cancel(ref, force=True)
    for node in refs:
        if node not in out:
            out[node] = f"no answer within {timeout_s:g} s"
            progress.finished(node, f"failed: {out[node]}", ok=False)
    return out


def describe_load(values: list[Any]) -> str:
    """``4 device(s), GEMM 610-640 TFLOP/s (bf16)`` from a load test's JSON."""
    load = NodeLoad.from_json(values[0])
    tflops = [d.gemm_tflops for d in load.devices]
    lo, hi = min(tflops, default=0.0), max(tflops, default=0.0)
    span = f"{lo:.4g}" if lo == hi else f"{lo:.4g}-{hi:.4g}"
    precision = load.devices[0].precision if load.devices else load.precision
    return f"{len(load.devices)} device(s), GEMM {span} TFLOP/s ({precision})"


def describe_sweep(values: list[Any]) -> str:
    """``busbw 1.2 GB/s at 16 MiB`` (the best size) from a group's sweeps."""
    points = [_point(p) for p in values[0]]
    if not points:
        return "no sizes"
    best = max(points, key=lambda p: p.busbw_gb_s)
    return f"busbw {best.busbw_gb_s:.4g} GB/s at {best.size_bytes / MiB:g} MiB"


def _point(data: Any) -> SweepPoint:
    return SweepPoint.from_fields(record_fields(data, "all-reduce sweep"))


def run_loads(
    nodes: Mapping[str, RayNode], precision: str, duration_s: float
) -> dict[str, list[Any] | str]:
    """Phase 1: the load test on every node at once; per node its JSON or the error.

    Every node's loader is made ready first; the GEMMs then start together.
    """
    loaders = {
        name: NodeLoader.options(  # type: ignore[attr-defined]
            scheduling_strategy=pinned(node), num_gpus=node.gpu_count
        ).remote()
        for name, node in nodes.items()
    }
    try:
        warm = gather(
            {name: [a.ready.remote()] for name, a in loaders.items()},
            LOAD_TIMEOUT_S,
            Progress("loading torch", len(loaders), say=lambda _line: None),
            lambda _values: "ready",
        )
        out: dict[str, list[Any] | str] = {n: v for n, v in warm.items() if isinstance(v, str)}
        refs = {
            name: [loader.run.remote(precision, duration_s)]
            for name, loader in loaders.items()
            if name not in out
        }
        progress = Progress("load test", len(refs))
        out.update(gather(refs, LOAD_TIMEOUT_S + duration_s, progress, describe_load))
        return out
    finally:
        for loader in loaders.values():
            with suppress(Exception):
                ray.kill(loader)


def run_intra(
    nodes: Mapping[str, RayNode], gpu_sizes: Sequence[int], cpu_sizes: Sequence[int]
) -> dict[str, IntraAllReduce]:
    """Phase 2: every node's own all-reduce sweep, all nodes at once."""
    out: dict[str, IntraAllReduce] = {}
    groups: dict[str, RankGroup] = {}
    for name, node in nodes.items():
        ranks, gpus = intra_shape(node)
        if ranks < 2:
            out[name] = IntraAllReduce("nccl", ranks, skipped="1 GPU: nothing to reduce across")
            continue
        sizes = gpu_sizes if gpus else cpu_sizes
        groups[name] = RankGroup.place(nodes, [(name, ranks)], gpus, sizes)
    try:
        started = dict(zip(groups, start_sweeps(list(groups.values())), strict=True))
        refs = {name: s for name, s in started.items() if not isinstance(s, str)}
        progress = Progress("all-reduce", len(groups))
        for name, s in started.items():
            if isinstance(s, str):
                progress.finished(name, f"failed: {s}", ok=False)
        found = gather(refs, CALL_TIMEOUT_S, progress, describe_sweep)
        found.update({name: s for name, s in started.items() if isinstance(s, str)})
    finally:
        for group in groups.values():
            with suppress(Exception):
                group.kill()
    for name, group in groups.items():
        answer = found[name]
        if isinstance(answer, str):
            out[name] = IntraAllReduce(group.backend, len(group.ranks), error=answer)
        else:
            points = tuple(_point(p) for p in answer[0])
            out[name] = IntraAllReduce(group.backend, len(group.ranks), points)
    return out


def node_results(
    names: Sequence[str],
    loads: Mapping[str, list[Any] | str],
    intra: Mapping[str, IntraAllReduce],
) -> dict[str, NodeResult]:
    """Per node in ``names`` order, its answer from the two phases."""
    out = {}
    for name in names:
        load = loads.get(name, "not tested")
        error = load if isinstance(load, str) else ""
        parsed: NodeLoad | None = None
        if not isinstance(load, str):
            try:
                parsed = NodeLoad.from_json(load[0], f"{name}: load")
            except RtkError as e:
                error = str(e)
        out[name] = NodeResult(parsed, error, intra.get(name))
    return out


def main(options: LoadJobOptions) -> LoadResult:
    """Test every alive node named in ``options``; what the job answers."""
    if not ray.is_initialized():
        ray.init(logging_level=logging.ERROR)
    order = list(options.nodes)
    found = alive_nodes(order)
    nodes = {name: found[name] for name in order if name in found}
    missing = tuple(name for name in order if name not in found)
    precision, duration_s = options.precision, options.duration_s
    _say(
        f"load test on {len(nodes)} node(s) at once: GEMM ({precision} on GPUs) for "
        f"{duration_s:g} s, copies; then each node's own all-reduce"
        + (f"; not in Ray: {len(missing)}" if missing else "")
    )
    loads = run_loads(nodes, precision, duration_s)
    intra = run_intra(
        nodes,
        options.gpu_sizes_bytes or GPU_SIZES_BYTES,
        options.cpu_sizes_bytes or CPU_SIZES_BYTES,
    )
    return LoadResult(node_results(list(nodes), loads, intra), missing)


if __name__ == "__main__":
    outcome = main(LoadJobOptions.from_json(json.loads(sys.argv[1])))
    print(RESULT_PREFIX + json.dumps(outcome.to_json()), flush=True)
