"""The per-node connection pool that the SSH and simulated transports share."""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from toolkit.inventory import Node, default_inventory
from toolkit.transport.pool import ConnectionPool


def node(name: str) -> Node:
    return dataclasses.replace(default_inventory().head, name=name)


class Opener:
    """Counts opens per node; a node named in ``hold`` waits for ``release``."""

    def __init__(self, hold: frozenset[str] = frozenset()) -> None:
        self.opened: list[str] = []
        self.hold = hold
        self.release = threading.Event()
        self.holding = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, target: Node) -> list[str]:
        if target.name in self.hold:
            self.holding.set()
            assert self.release.wait(10)
        with self.lock:
            self.opened.append(target.name)
        return [target.name, "open"]


def test_threads_that_reach_one_node_at_once_share_one_handshake() -> None:
    opener = Opener()
    pool: ConnectionPool[list[str]] = ConnectionPool(opener)
    with ThreadPoolExecutor(16) as threads:
        got = list(threads.map(lambda _: pool.get(node("n1")), range(64)))
    assert opener.opened == ["n1"]
    assert all(connection is got[0] for connection in got)


def test_a_slow_handshake_holds_up_only_its_own_node() -> None:
    opener = Opener(hold=frozenset({"slow"}))
    pool: ConnectionPool[list[str]] = ConnectionPool(opener)
    with ThreadPoolExecutor(2) as threads:
        slow = threads.submit(pool.get, node("slow"))
        assert opener.holding.wait(10)
        assert pool.get(node("fast")) == ["fast", "open"]  # while "slow" is still opening
        assert not slow.done()
        opener.release.set()
        assert slow.result(10) == ["slow", "open"]


def test_a_closed_connection_is_opened_again_and_a_failed_open_keeps_nothing() -> None:
    opener = Opener()
    pool: ConnectionPool[list[str]] = ConnectionPool(opener, is_open=lambda c: c[1] == "open")
    first = pool.get(node("n1"))
    first[1] = "closed"
    assert pool.get(node("n1")) == ["n1", "open"]
    assert opener.opened == ["n1", "n1"]

    def refuse(target: Node) -> list[str]:
        raise OSError(f"{target.name}: refused")

    failing: ConnectionPool[list[str]] = ConnectionPool(refuse)
    with pytest.raises(OSError, match="n2: refused"):
        failing.get(node("n2"))
    assert len(failing) == 0


def test_forget_and_drain_hand_back_what_was_kept() -> None:
    opener = Opener()
    pool: ConnectionPool[list[str]] = ConnectionPool(opener)
    for name in ("a", "b", "c"):
        pool.get(node(name))
    assert pool.forget(node("a")) == ["a", "open"]
    assert pool.forget(node("a")) is None
    assert sorted(c[0] for c in pool.drain()) == ["b", "c"]
    assert len(pool) == 0
    pool.get(node("b"))
    assert opener.opened == ["a", "b", "c", "b"]
