"""Transports: how rtk runs commands and writes files on nodes.

``TRANSPORTS`` maps an inventory's ``transport`` to its class; the class says what
bring-up needs to know before one is made (``daemons_in_foreground``). Making one
needs what only the layers above know (the SLURM job, rtk's state directory): see
``toolkit.cluster.connect.make_transport``.
"""

from __future__ import annotations

from toolkit.errors import RtkError
from toolkit.inventory import Inventory
from toolkit.transport.base import CommandResult, Transport
from toolkit.transport.group import GroupResult, run_each
from toolkit.transport.local import LocalTransport
from toolkit.transport.srun import SrunTransport
from toolkit.transport.ssh import SshTransport

__all__ = [
    "TRANSPORTS",
    "CommandResult",
    "GroupResult",
    "LocalTransport",
    "SrunTransport",
    "SshTransport",
    "Transport",
    "run_each",
    "transport_class",
]

TRANSPORTS: dict[str, type[Transport]] = {
    LocalTransport.name: LocalTransport,
    SshTransport.name: SshTransport,
    SrunTransport.name: SrunTransport,
}


def transport_class(inventory: Inventory) -> type[Transport]:
    """The class of the transport the inventory asks for.

    Raises:
        RtkError: That transport is not available in this version.
    """
    found = TRANSPORTS.get(inventory.transport)
    if found is None:
        raise RtkError(f"{inventory.source}: transport {inventory.transport!r} is not available")
    return found
