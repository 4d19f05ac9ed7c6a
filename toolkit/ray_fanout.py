"""Ask many Ray nodes the same question at once: a task pinned to each, a bounded window.

A driver that needs something from every node (the ranks' files after a run,
``toolkit.telemetry.rank_files``; a stalled run's evidence, ``toolkit.stall.collect``)
submits one task per node, pinned there (``NodeAffinitySchedulingStrategy``, hard),
keeps at most ``in_flight`` of them waiting, and gives each ``timeout_s`` from its
submission: a node that is lost, or whose task hangs, is given up on (its task
cancelled) rather than waited for. So N nodes take at most about
``timeout_s * ceil(N / in_flight)``.

Kept apart from both callers: it is Ray plumbing, not telemetry nor stalls.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

K = TypeVar("K")
T = TypeVar("T")

# How long the loop waits at most before it looks for answers past their time.
POLL_S = 1.0


@dataclass(frozen=True)
class NodeAnswer(Generic[K, T]):
    """One node's answer, or why there is none.

    Attributes:
        key: What the caller asked about (the node, as the caller knows it).
        value: The task's result (None when it failed or timed out).
        error: Why there is none: the task's exception, or a ``TimeoutError``.
        elapsed_s: From the task's submission to its answer (or to giving up).
    """

    key: K
    value: T | None
    error: BaseException | None
    elapsed_s: float


def pinned(node_id: str) -> NodeAffinitySchedulingStrategy:
    """Run on Ray node ``node_id`` only: never elsewhere, even when it has no room."""
    return NodeAffinitySchedulingStrategy(node_id, soft=False)


def ask_nodes(
    keys: Iterable[K],
    submit: Callable[[K], ray.ObjectRef[T]],
    timeout_s: float,
    in_flight: int,
) -> Iterator[NodeAnswer[K, T]]:
    """Each key's answer as it comes, at most ``in_flight`` tasks waiting at a time.

    Args:
        keys: What to ask about, one task each.
        submit: Starts the task for a key (pinned to its node: ``pinned``).
        timeout_s: How long each task may take from its submission.
        in_flight: How many tasks may wait at once.
    """
    waiting = iter(keys)
    asked: dict[ray.ObjectRef[T], tuple[K, float]] = {}

    def ask_more() -> None:
        # Checked before each submission: a round that answered nothing (every task
        # slower than a poll) must not add one more to a full window.
        while len(asked) < in_flight:
            try:
                key = next(waiting)
            except StopIteration:
                return
            asked[submit(key)] = (key, time.monotonic())

    ask_more()
    while asked:
        first_deadline_s = min(started_s for _, started_s in asked.values()) + timeout_s
        wait_s = min(POLL_S, max(0.0, first_deadline_s - time.monotonic()))
        ready, rest = ray.wait(list(asked), num_returns=1, timeout=wait_s)
        if ready and rest:  # and every other answer already in
            ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        for ref in ready:
            key, started_s = asked.pop(ref)
            try:
                value: T = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - one node's failure is its answer
                yield NodeAnswer(key, None, e, time.monotonic() - started_s)
                continue
            yield NodeAnswer(key, value, None, time.monotonic() - started_s)
        now_s = time.monotonic()
        for ref, (key, started_s) in list(asked.items()):
            if now_s - started_s >= timeout_s:
                del asked[ref]
                with contextlib.suppress(Exception):  # a lost node's task may be gone
                    ray.cancel(ref, force=True)
                error = TimeoutError(f"no answer in {timeout_s:g} s")
                yield NodeAnswer(key, None, error, now_s - started_s)
        ask_more()
