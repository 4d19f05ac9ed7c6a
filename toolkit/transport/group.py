"""Run one function per node in parallel; collect each node's result or error.

Like fabric's ``GroupResult``: one failing node never hides the others' results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")


class Named(Protocol):
    """Anything with a node name: a ``Node``, a ``NodePlan``."""

    @property
    def name(self) -> str:
        """The node's name."""
        ...


N = TypeVar("N", bound=Named)

DEFAULT_PARALLEL = 32


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
    """Call ``task(node)`` for every node (or node plan), at most ``parallel`` at a time."""
    node_list = list(nodes)
    group: GroupResult[T] = GroupResult()
    if not node_list:
        return group
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(node_list)))) as pool:
        futures = {node.name: pool.submit(task, node) for node in node_list}
        for name, future in futures.items():
            try:
                group.results[name] = future.result()
            except Exception as e:  # noqa: BLE001 - kept per node, re-raised by callers
                group.errors[name] = e
    return group
