"""Make the transport an inventory asks for, with what only this layer knows.

The srun transport needs the SLURM job it runs steps in (from the environment) and a
directory on this machine for the logs of the steps it leaves running (under rtk's
state directory); the others need nothing.
"""

from __future__ import annotations

from toolkit.inventory import Inventory
from toolkit.slurm.allocation import read_allocation
from toolkit.state.store import state_root
from toolkit.transport import SrunTransport, Transport, transport_class


def make_transport(inventory: Inventory) -> Transport:
    """The transport the inventory asks for, ready to use (a context manager).

    Raises:
        toolkit.errors.RtkError: That transport is not available in this version.
        toolkit.errors.SlurmError: srun, but not inside an allocation or without srun.
    """
    kind = transport_class(inventory)
    if kind is SrunTransport:
        job_id = read_allocation().job_id
        return SrunTransport(job_id, state_root() / inventory.name / "srun")
    return kind()
