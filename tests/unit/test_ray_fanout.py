"""Asking nodes at once on a real local Ray: each answer, a failure, a task that never answers.

Every task here is pinned to the one local node; what matters is the window (never
more than ``in_flight`` waiting), and that a hung task is given up on at its time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from toolkit.ray_fanout import NodeAnswer, ask_nodes, pinned

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def node_id(ray_available: None) -> Iterator[str]:
    import ray

    # address="local": a Ray of its own, whatever cluster a file in /tmp/ray points at
    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )
    try:
        yield ray.get_runtime_context().get_node_id()
    finally:
        ray.shutdown()


def test_answers_failures_and_a_hung_task_through_a_small_window(node_id: str) -> None:
    import ray

    @ray.remote(num_cpus=0)
    def answer(key: int) -> int:
        if key == 3:
            raise OSError("disk gone")
        if key == 4:
            time.sleep(600)
        return key * 10

    submitted: list[int] = []
    answered: list[NodeAnswer[int, int]] = []

    def submit(key: int) -> ray.ObjectRef[int]:
        assert len(submitted) - len(answered) < 2, "more than in_flight waiting"
        submitted.append(key)
        return answer.options(scheduling_strategy=pinned(node_id)).remote(key)

    for found in ask_nodes(range(6), submit, timeout_s=5.0, in_flight=2):
        answered.append(found)
    assert submitted == list(range(6))
    by_key = {a.key: a for a in answered}
    assert sorted(by_key) == list(range(6))
    assert {k: a.value for k, a in by_key.items() if a.error is None} == {
        0: 0,
        1: 10,
        2: 20,
        5: 50,
    }
    assert "disk gone" in str(by_key[3].error) and by_key[3].value is None
    hung = by_key[4]
    assert isinstance(hung.error, TimeoutError) and str(hung.error) == "no answer in 5 s"
    assert hung.elapsed_s >= 5.0


def test_tasks_slower_than_a_poll_never_overfill_the_window(node_id: str) -> None:
    """A round of the loop that answers nothing (every task still running) asks no more."""
    import ray

    @ray.remote(num_cpus=0)
    def slow(key: int) -> int:
        time.sleep(1.5)  # longer than the loop's poll (POLL_S, 1 s)
        return key

    submitted: list[int] = []
    answered: list[int] = []

    def submit(key: int) -> ray.ObjectRef[int]:
        assert len(submitted) - len(answered) < 2, "more than in_flight waiting"
        submitted.append(key)
        return slow.options(scheduling_strategy=pinned(node_id)).remote(key)

    for found in ask_nodes(range(4), submit, timeout_s=10.0, in_flight=2):
        answered.append(found.key)
    assert sorted(answered) == [0, 1, 2, 3]


def test_nothing_to_ask_answers_nothing(node_id: str) -> None:
    assert list(ask_nodes([], lambda key: pytest.fail("asked"), 1.0, 4)) == []
