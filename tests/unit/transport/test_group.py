"""``run_each`` keeps at most ``parallel`` calls in flight; ``Waves`` paces beginnings."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from toolkit.transport.group import Waves, run_each


@dataclass(frozen=True)
class Item:
    name: str


def test_run_each_never_has_more_than_parallel_calls_in_flight() -> None:
    lock = threading.Lock()
    in_flight = peak = 0
    threads: set[int] = set()

    def task(item: Item) -> str:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
            threads.add(threading.get_ident())
        time.sleep(0.01)
        with lock:
            in_flight -= 1
        if item.name == "n07":
            raise RuntimeError("n07 broke")
        return item.name.upper()

    items = [Item(f"n{i:02d}") for i in range(40)]
    group = run_each(items, task, parallel=6)
    assert peak == 6
    # A thread per call in flight, reused: never one per node.
    assert len(threads) <= 6
    assert set(group.failed) == {"n07"} and str(group.failed["n07"]) == "n07 broke"
    assert group.succeeded["n08"] == "N08" and len(group.succeeded) == 39


def test_run_each_with_fewer_nodes_than_parallel_makes_one_thread_each() -> None:
    threads: set[int] = set()
    barrier = threading.Barrier(3, timeout=5)

    def task(item: Item) -> None:
        threads.add(threading.get_ident())
        barrier.wait()  # all three at once, or this times out

    group = run_each([Item("a"), Item("b"), Item("c")], task, parallel=256)
    assert not group.failed and len(threads) == 3


class FakeClock:
    """A clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_waves_let_size_begin_per_interval_without_waiting_for_the_previous() -> None:
    clock = FakeClock()
    waves = Waves(4, 0.5, clock=clock, sleep=clock.sleep)
    begun = [waves.wait() - 100.0 for _ in range(10)]
    assert begun == [0.0] * 4 + [0.5] * 4 + [1.0] * 2
    assert waves.waves == 3 and waves.begun == 10
    assert waves.waited_s == pytest.approx(1.0)


def test_waves_never_let_more_than_size_begin_within_an_interval() -> None:
    clock = FakeClock()
    waves = Waves(3, 1.0, clock=clock, sleep=clock.sleep)
    begun = []
    # Operations become ready at uneven times: some late, some in bursts.
    for gap in [0.0, 0.0, 0.4, 0.0, 0.0, 2.0, 0.1, 0.0, 0.0, 0.0]:
        clock.now += gap
        begun.append(waves.wait())
    for i in range(len(begun) - 3):
        assert begun[i + 3] - begun[i] >= 1.0 - 1e-9
    # Nothing waits longer than needed: a ready operation begins at once when allowed.
    assert begun[5] - begun[4] == pytest.approx(2.0)


def test_waves_reject_an_empty_wave() -> None:
    with pytest.raises(ValueError, match="size >= 1"):
        Waves(0, 1.0)
