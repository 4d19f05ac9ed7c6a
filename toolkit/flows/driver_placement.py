"""Where a Ray job's driver runs: placed (``AUTO`` decided, ``LOCAL`` checked), or ahead.

A driver runs in the cluster's Jobs API (``Driver.JOB``) or on this machine
(``Driver.LOCAL``), which must then be the head. The trainer's local driver can
start while its cluster comes up, held at a gate (``toolkit.driver_gate``) until the
nodes have joined: ``DriverAhead``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from toolkit.cluster.plan import ClusterPlan
from toolkit.errors import JobError
from toolkit.jobs.local_driver import LocalDriver, is_local_address
from toolkit.jobs.request import Driver, JobRequest
from toolkit.workloads import Workload


def place_driver(
    plan: ClusterPlan, driver: Driver, environ: Mapping[str, str] | None = None
) -> Driver:
    """Where the driver of a job on ``plan``'s cluster runs: ``AUTO`` decided, ``LOCAL`` checked.

    ``AUTO`` is ``LOCAL`` inside a SLURM allocation (``SLURM_JOB_ID`` in
    ``environ``, default this process's) on the head, else ``JOB``.

    Raises:
        JobError: ``LOCAL`` asked for, but the head's address is not this machine's.
    """
    if driver is Driver.JOB:
        return driver
    here = is_local_address(plan.head.node.address)
    if driver is Driver.LOCAL:
        if not here:
            raise JobError(
                f"--driver local runs the job's driver on this machine, but the head "
                f"of {plan.inventory.name!r} is {plan.head.node.address}, not "
                "here: run it on the head, or use --driver job"
            )
        return driver
    in_allocation = "SLURM_JOB_ID" in (os.environ if environ is None else environ)
    return Driver.LOCAL if here and in_allocation else Driver.JOB


@dataclass(frozen=True)
class DriverAhead:
    """A job's local driver, started while its cluster comes up (``Session.driver_ahead``)."""

    request: JobRequest
    driver: LocalDriver

    def start(self) -> None:
        """Start it, held at the gate (a ``bring_up`` ``head_ready`` callback)."""
        self.driver.start(gated=True)

    def cancel(self) -> None:
        """Stop it: the bring-up failed or was interrupted."""
        self.driver.cancel()


def gated(workload: Workload, request: JobRequest) -> bool:
    """Whether ``request``'s driver can start ahead: the trainer's, run locally."""
    return workload.starts_ahead and request.driver is Driver.LOCAL
