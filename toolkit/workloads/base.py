"""What every workload says of itself: its checks, its run, the Ray job it becomes."""

from __future__ import annotations

from typing import Protocol

from toolkit.cluster.plan import ClusterPlan
from toolkit.jobs.request import JobRequest
from toolkit.state.store import StateStore


class Workload(Protocol):
    """Something a session runs on a cluster as one Ray job.

    Each kind is one module of ``toolkit.workloads``; the flows call these and never
    ask which kind they hold.
    """

    @property
    def run_dir(self) -> str | None:
        """Where the run writes (on the nodes); None for a job that writes no run."""
        ...

    @property
    def starts_ahead(self) -> bool:
        """Whether its driver, run here, may start while the cluster comes up.

        Such a driver waits at a gate (``toolkit.driver_gate``) until the cluster is
        ready: the trainer's imports Ray Train and builds its model meanwhile.
        """
        ...

    def check(self) -> None:
        """Raise ``RtkError`` for an invalid option, before anything starts."""
        ...

    def remember(self, store: StateStore) -> None:
        """Keep what later commands need to find the run (``rtk report RUN_ID``)."""
        ...

    def job_request(self, plan: ClusterPlan, stamp: int, ship_code: bool) -> JobRequest:
        """The Ray job that runs it on ``plan``'s cluster (pure).

        ``stamp`` (Unix seconds) makes its submission id unique; ``ship_code`` False:
        the nodes import the same rtk as this machine and the job carries none
        (``toolkit.jobs.shipped_code``).
        """
        ...


class Unremembered:
    """What most workloads answer: no driver started ahead, nothing kept in the state."""

    @property
    def starts_ahead(self) -> bool:
        """Never: only the trainer's driver waits at a gate."""
        return False

    def remember(self, store: StateStore) -> None:
        """Nothing: the run's directory is the one the user (or the sweep) named."""
