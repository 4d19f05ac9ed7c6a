"""Transports: how rtk runs commands and writes files on nodes."""

from __future__ import annotations

from toolkit.errors import RtkError
from toolkit.inventory import Inventory
from toolkit.transport.base import CommandResult, Transport
from toolkit.transport.group import GroupResult, run_each
from toolkit.transport.local import LocalTransport

__all__ = [
    "CommandResult",
    "GroupResult",
    "LocalTransport",
    "Transport",
    "make_transport",
    "run_each",
]


def make_transport(inventory: Inventory) -> Transport:
    """The transport the inventory asks for.

    Raises:
        RtkError: That transport is not available in this version.
    """
    if inventory.transport == "local":
        return LocalTransport()
    raise RtkError(
        f"{inventory.source}: transport {inventory.transport!r} is not available yet in this "
        "version of rtk; use transport: local (one node on this machine) or rtk up --local"
    )
