"""Transports: how rtk runs commands and writes files on nodes."""

from __future__ import annotations

from toolkit.errors import RtkError
from toolkit.inventory import Inventory
from toolkit.transport.base import CommandResult, Transport
from toolkit.transport.group import GroupResult, run_each
from toolkit.transport.local import LocalTransport
from toolkit.transport.srun import SrunTransport
from toolkit.transport.ssh import SshTransport

__all__ = [
    "CommandResult",
    "GroupResult",
    "LocalTransport",
    "SrunTransport",
    "SshTransport",
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
    if inventory.transport == "ssh":
        return SshTransport()
    if inventory.transport == "srun":
        from toolkit.cluster.state import state_root
        from toolkit.slurm.allocation import read_allocation

        job_id = read_allocation().job_id
        return SrunTransport(job_id, state_root() / inventory.name / "srun")
    raise RtkError(f"{inventory.source}: transport {inventory.transport!r} is not available")
