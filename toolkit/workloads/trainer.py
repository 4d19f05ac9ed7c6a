"""rtk's own trainer (``rtk train``) as a Ray job."""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.cluster.plan import ClusterPlan
from toolkit.jobs.request import JobRequest
from toolkit.state.store import StateStore
from toolkit.train.config import TrainConfig
from toolkit.train.job_spec import remember_run, train_job


@dataclass(frozen=True)
class TrainWorkload:
    """The built-in trainer; its run directory is ``config.run_dir``."""

    config: TrainConfig
    run_id: str

    @property
    def run_dir(self) -> str | None:
        """Where the run writes (on the nodes)."""
        return self.config.run_dir

    @property
    def starts_ahead(self) -> bool:
        """Yes: its driver imports Ray Train and builds the model while the cluster comes up."""
        return True

    def check(self) -> None:
        """The training configuration."""
        self.config.check()

    def remember(self, store: StateStore) -> None:
        """The run, last in the cluster's state, so that ``rtk train --resume`` finds it."""
        remember_run(store, self.run_id, self.config.run_dir)

    def job_request(self, plan: ClusterPlan, stamp: int, ship_code: bool) -> JobRequest:
        """``toolkit.train.job`` with the configuration, as ``train_job`` writes it."""
        entrypoint, train_env = train_job(plan, self.config, ship_code)
        name = f"rtk-train-{self.run_id}-{stamp}"
        return JobRequest("train", entrypoint, train_env, name, plan.dashboard_url, self.run_dir)
