"""Run one function per node in parallel; collect each node's result or error.

Like fabric's ``GroupResult``: one failing node never hides the others' results.
``run_each`` keeps at most ``parallel`` calls in flight, a thread each, and no thread
for a node that waits its turn; ``Waves`` paces operations that must not all begin
at once (workers' ``ray start``, which register with the head's GCS).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from toolkit.inventory.models import PARALLEL

T = TypeVar("T")


class Named(Protocol):
    """Anything with a node name: a ``Node``, a ``NodePlan``."""

    @property
    def name(self) -> str:
        """The node's name."""
        ...


N = TypeVar("N", bound=Named)

# The inventory's default ``fanout.parallel``; callers with an inventory pass its own.
DEFAULT_PARALLEL = PARALLEL


@dataclass
class GroupResult(Generic[T]):
    """Per node name: the value returned, or the exception raised."""

    results: dict[str, T] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict)

    @property
    def failed(self) -> Mapping[str, BaseException]:
        """Nodes whose function raised."""
        return self.errors

    @property
    def succeeded(self) -> Mapping[str, T]:
        """Nodes whose function returned."""
        return self.results


def run_each(
    nodes: Iterable[N], task: Callable[[N], T], *, parallel: int = DEFAULT_PARALLEL
) -> GroupResult[T]:
    """Call ``task(node)`` for every node (or node plan), at most ``parallel`` at a time.

    Threads are made as calls start, up to ``min(parallel, nodes)``; a node waiting
    for its turn is a queued call, not a thread. On an exception here (Ctrl-C), calls
    not yet begun are dropped and those in flight are waited for.
    """
    node_list = list(nodes)
    group: GroupResult[T] = GroupResult()
    if not node_list:
        return group
    pool = ThreadPoolExecutor(max_workers=max(1, min(parallel, len(node_list))))
    try:
        futures = {node.name: pool.submit(task, node) for node in node_list}
        for name, future in futures.items():
            try:
                group.results[name] = future.result()
            except Exception as e:  # noqa: BLE001 - kept per node, re-raised by callers
                group.errors[name] = e
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return group


class Waves:
    """At most ``size`` operations begin within any ``interval_s``: overlapping waves.

    ``wait()`` returns when the next operation may begin. A wave does not wait for
    the one before it to finish, only for ``interval_s`` to pass since it began, so
    ``n`` operations that take ``d`` seconds each are all done after about
    ``(n / size - 1) * interval_s + d``. Not thread-safe: one caller paces.
    """

    def __init__(
        self,
        size: int,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Pace ``size`` beginnings per ``interval_s`` on ``clock``."""
        if size < 1 or interval_s < 0:
            raise ValueError(f"waves of {size} every {interval_s} s: need size >= 1, >= 0 s")
        self.size = size
        self.interval_s = interval_s
        self._clock = clock
        self._sleep = sleep
        self._recent: deque[float] = deque(maxlen=size)
        self.begun = 0
        self.waited_s = 0.0

    def wait(self) -> float:
        """Block until the next operation may begin; the clock's time then."""
        now = self._clock()
        if len(self._recent) == self.size:
            ready = self._recent[0] + self.interval_s
            if now < ready:
                self._sleep(ready - now)
                self.waited_s += ready - now
                now = max(self._clock(), ready)
        self._recent.append(now)
        self.begun += 1
        return now

    @property
    def waves(self) -> int:
        """Waves begun so far (full ones, and the one being filled)."""
        return -(-self.begun // self.size)
