"""The ranks' files brought from their nodes to the head's run directory, after a run.

Each rank writes its markers, and rank 0 its metrics.jsonl, on the node it runs on
(``RunDir.rank_files``). Without a shared filesystem those files lie on the ranks'
nodes only, and rtk fetches a run's results from the head alone: so when the run
ends the driver (on the head) asks every other alive node, a task pinned to each,
for the rank files it holds longer than the head's copy, and writes them into the
head's run directory. A node that shares the head's filesystem sends nothing back.

Both drivers call ``gather_rank_files`` once their run is over, with telemetry on or
off: ``toolkit.train.job`` and ``toolkit.telemetry.record_job``. With telemetry, a node's
sampler (an actor already on it) answers; a task would first start a Ray worker there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ray

from toolkit.ray_fanout import ask_nodes, pinned
from toolkit.rundir import RunDir

logger = logging.getLogger(__name__)

# Nodes asked at once, and how long each may take to answer. Each answer is a Ray
# task on its node, and a node's first task waits for a worker process to start
# (a second or two): asked 8 at a time, 1,000 nodes would take some 125 such waits
# after every run; 64 at once, 16, while the driver holds at most 64 answers (each
# one node's rank files). Ray runs node-pinned tasks side by side without pacing
# them (benchmarks/gather_rank_files.py: 31 at once).
GATHER_IN_FLIGHT = 64
CALL_TIMEOUT_S = 60.0


def rank_file_sizes(run_dir: str | Path) -> dict[str, int]:
    """The rank files in ``run_dir`` as this machine sees them: relative path -> bytes."""
    layout = RunDir(run_dir)
    return {str(p.relative_to(layout.root)): p.stat().st_size for p in layout.rank_files()}


def rank_files_longer(run_dir: str | Path, have: Mapping[str, int]) -> dict[str, bytes]:
    """The rank files here that ``have`` (path -> bytes, the head's) lacks or holds shorter.

    Files only grow (lines appended), so a longer file holds everything a shorter one
    does; the same length means the same file (a shared filesystem).
    """
    layout = RunDir(run_dir)
    found: dict[str, bytes] = {}
    for path in layout.rank_files():
        relative = str(path.relative_to(layout.root))
        if path.stat().st_size > have.get(relative, -1):
            found[relative] = path.read_bytes()
    return found


def keep_longer(run_dir: str | Path, found: Mapping[str, bytes]) -> list[str]:
    """Write each of ``found`` (relative path -> bytes) the run dir lacks or holds shorter.

    Returns:
        The relative paths written.
    """
    root = RunDir(run_dir).root
    written = []
    for relative, data in found.items():
        target = root / relative
        if target.exists() and target.stat().st_size >= len(data):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written.append(relative)
    return written


@ray.remote(num_cpus=0)
def _read_rank_files(run_dir: str, have: dict[str, int]) -> dict[str, bytes]:
    """``rank_files_longer`` on the node this task runs on."""
    return rank_files_longer(run_dir, have)


def gather_rank_files(run_dir: str | Path, helpers: Mapping[str, Any] | None = None) -> list[str]:
    """Copy the ranks' files from every other alive node into the head's ``run_dir``.

    Runs in a driver on the head, connected to Ray, after the run's ranks have ended.
    ``GATHER_IN_FLIGHT`` nodes are asked at a time and each answer is written as it
    comes; a node that cannot answer within ``CALL_TIMEOUT_S`` is logged and skipped
    (its ranks' files stay on it), never raised.

    Args:
        run_dir: The run directory, as the nodes see it.
        helpers: Ray node id -> an actor on that node with ``read_rank_files`` (the
            telemetry's samplers, ``TelemetrySession.helpers``); other nodes get a task.

    Returns:
        The relative paths written (none on a shared filesystem).
    """
    helpers = helpers or {}
    head_id = ray.get_runtime_context().get_node_id()
    nodes = [
        node
        for node in ray.nodes()  # type: ignore[no-untyped-call]
        if node.get("Alive") and node["NodeID"] != head_id
    ]
    written: list[str] = []
    if not nodes:
        return written
    have = ray.put(rank_file_sizes(run_dir))  # one copy for every node's task

    def by_task(node: Mapping[str, object]) -> ray.ObjectRef[dict[str, bytes]]:
        where = pinned(str(node["NodeID"]))
        return _read_rank_files.options(scheduling_strategy=where).remote(str(run_dir), have)

    def ask(node: Mapping[str, object]) -> ray.ObjectRef[dict[str, bytes]]:
        helper = helpers.get(str(node["NodeID"]))
        if helper is None:
            return by_task(node)
        ref: ray.ObjectRef[dict[str, bytes]] = helper.read_rank_files.remote(str(run_dir), have)
        return ref

    retry = []  # nodes whose helper failed (a sampler that died): asked again by task
    for asked, again in ((ask, True), (by_task, False)):
        for answer in ask_nodes(nodes, asked, CALL_TIMEOUT_S, GATHER_IN_FLIGHT):
            if answer.value is not None:
                written += keep_longer(run_dir, answer.value)  # here alone: one writer per file
            elif again and str(answer.key["NodeID"]) in helpers:
                retry.append(answer.key)
            else:
                _cannot_read(answer.key, answer.error or ValueError("no answer"))
        nodes = retry
    return written


def _cannot_read(node: Mapping[str, object], error: BaseException) -> None:
    """Log that ``node`` (one of ``ray.nodes()``) did not give its rank files."""
    logger.warning(
        "rank files: could not read them on node %s (%s): %s",
        node.get("NodeManagerAddress"),
        str(node["NodeID"])[:12],
        error,
    )
