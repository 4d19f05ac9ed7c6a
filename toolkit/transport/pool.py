"""One connection per node, opened on first use and shared by every thread after it.

The SSH transport keeps a fabric connection here and the simulated transport its
modelled handshake, so the 1,024-node simulations exercise the same locking that real
bring-ups do: threads that reach one node at once wait for a single handshake, threads
that reach different nodes never wait for each other, and a connection found closed is
opened again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from toolkit.inventory import Node

C = TypeVar("C")


class ConnectionPool(Generic[C]):
    """Per-node connections: ``get`` opens one once; ``forget`` and ``drain`` drop them."""

    def __init__(
        self, open_connection: Callable[[Node], C], is_open: Callable[[C], bool] | None = None
    ) -> None:
        """Keep nothing yet.

        Args:
            open_connection: Opens a node's connection (may raise; nothing is kept then).
            is_open: Whether a kept connection can still be used; one that cannot is
                opened again. None: a kept connection stays usable.
        """
        self._open = open_connection
        self._is_open = is_open
        self._connections: dict[str, C] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def node_lock(self, node: Node) -> threading.Lock:
        """The lock held while ``node``'s connection is opened.

        Callers may hold it to use a part of the connection that is not thread-safe
        (opening an SFTP channel).
        """
        with self._guard:
            return self._locks.setdefault(node.name, threading.Lock())

    def get(self, node: Node) -> C:
        """``node``'s open connection, opening it (once, whoever asks) when needed."""
        with self.node_lock(node):
            with self._guard:
                existing = self._connections.get(node.name)
            if existing is not None and (self._is_open is None or self._is_open(existing)):
                return existing
            connection = self._open(node)
            with self._guard:
                self._connections[node.name] = connection
            return connection

    def forget(self, node: Node) -> C | None:
        """Drop ``node``'s connection (the caller closes it); the next ``get`` opens anew."""
        with self._guard:
            return self._connections.pop(node.name, None)

    def drain(self) -> list[C]:
        """Drop every connection and return them for the caller to close."""
        with self._guard:
            connections = list(self._connections.values())
            self._connections.clear()
        return connections

    def __len__(self) -> int:
        with self._guard:
            return len(self._connections)
