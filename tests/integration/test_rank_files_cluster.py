"""The end-of-run gather of rank files on a real Ray cluster of four nodes (raylets).

The nodes share this machine's filesystem, so each node's task is replaced by one
that answers with a file named after its node: what comes back, and from whom, is
then visible. One node never answers: it is named and skipped after the timeout,
and the others' files are written all the same, through a window smaller than the
number of nodes. The real task on nodes without a shared filesystem runs in
``test_train_cluster.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.ray

CALL_TIMEOUT_S = 10.0  # each node's; the silent node's answer is held past the gather
GATHER_DEADLINE_S = 120.0  # far past that timeout on any machine; the node never answers


@pytest.fixture(scope="module")
def ray_nodes(ray_available: None) -> Iterator[list[dict[str, Any]]]:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        for _ in range(3):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        yield [n for n in ray.nodes() if n["Alive"]]
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_a_node_that_never_answers_is_named_and_the_others_are_written(
    ray_nodes: list[dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from toolkit.telemetry import rank_files

    head_id = ray.get_runtime_context().get_node_id()
    others = [n for n in ray_nodes if n["NodeID"] != head_id]
    assert len(others) == 3
    silent_id = others[0]["NodeID"]
    release = tmp_path / "release"  # the silent node answers only once this exists

    @ray.remote(num_cpus=0)
    def answer(run_dir: str, have: dict[str, int]) -> dict[str, bytes]:
        node_id = ray.get_runtime_context().get_node_id()
        while node_id == silent_id and not release.exists():
            time.sleep(0.1)
        return {f"markers/from-{node_id[:12]}.jsonl": b'{"event": "run_start"}\n'}

    # Each node's worker started first: an answering node's task then answers at once,
    # not after a worker's start, which a loaded machine made take past the timeout.
    @ray.remote(num_cpus=0)
    def warm() -> str:
        return str(ray.get_runtime_context().get_node_id())

    pinned = [
        warm.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
        for n in others
    ]
    assert sorted(ray.get([task.remote() for task in pinned])) == sorted(
        str(n["NodeID"]) for n in others
    )
    monkeypatch.setattr(rank_files, "_read_rank_files", answer)
    monkeypatch.setattr(rank_files, "GATHER_IN_FLIGHT", 2)  # fewer than the nodes asked
    monkeypatch.setattr(rank_files, "CALL_TIMEOUT_S", CALL_TIMEOUT_S)
    # The gather must end while the silent node still holds its answer back: it gives
    # up on it at its timeout, never waiting for it (deadline: the thread's join).
    written: list[str] = []
    with caplog.at_level(logging.WARNING, logger=rank_files.__name__):
        gather = threading.Thread(
            target=lambda: written.extend(rank_files.gather_rank_files(tmp_path))
        )
        gather.start()
        gather.join(GATHER_DEADLINE_S)
        ended = not gather.is_alive()
        release.touch()
        gather.join()
    assert ended, "the gather waited for the node that never answers"
    answered = sorted(f"markers/from-{n['NodeID'][:12]}.jsonl" for n in others[1:])
    assert sorted(written) == answered
    assert all((tmp_path / p).is_file() for p in answered)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and silent_id[:12] in warnings[0], warnings
    assert f"no answer in {CALL_TIMEOUT_S:g} s" in warnings[0]


def test_a_node_with_a_helper_actor_is_asked_through_it_and_the_others_by_task(
    ray_nodes: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With telemetry, each node's sampler answers for its node (no worker to start)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from toolkit.telemetry import rank_files

    head_id = ray.get_runtime_context().get_node_id()
    others = [n["NodeID"] for n in ray_nodes if n["NodeID"] != head_id]

    @ray.remote(num_cpus=0)
    def by_task(run_dir: str, have: dict[str, int]) -> dict[str, bytes]:
        node_id = ray.get_runtime_context().get_node_id()
        return {f"markers/task-{node_id[:12]}.jsonl": b"{}\n"}

    @ray.remote(num_cpus=0)
    class Helper:
        def read_rank_files(self, run_dir: str, have: dict[str, int]) -> dict[str, bytes]:
            node_id = ray.get_runtime_context().get_node_id()
            return {f"markers/helper-{node_id[:12]}.jsonl": b"{}\n"}

    helper, dead = (
        Helper.options(  # type: ignore[attr-defined]
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
        ).remote()
        for node_id in others[:2]
    )
    ray.kill(dead)  # a sampler that died during the run: its node is asked by task
    monkeypatch.setattr(rank_files, "_read_rank_files", by_task)
    try:
        written = rank_files.gather_rank_files(tmp_path, {others[0]: helper, others[1]: dead})
    finally:
        ray.kill(helper)
    assert sorted(written) == sorted(
        [f"markers/helper-{others[0][:12]}.jsonl"]
        + [f"markers/task-{node_id[:12]}.jsonl" for node_id in others[1:]]
    )
