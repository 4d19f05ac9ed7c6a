"""Any command as a Ray job: plain (``rtk launch``) or recorded under telemetry."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.cluster.plan import ClusterPlan
from toolkit.jobs.request import JobRequest
from toolkit.jobs.runtime_env import working_dir_env
from toolkit.power.settings import PowerSettings
from toolkit.stall.settings import WatchSettings
from toolkit.state.store import state_root
from toolkit.telemetry.options import TelemetryOptions
from toolkit.telemetry.record_submission import record_job
from toolkit.workloads.base import Unremembered


@dataclass(frozen=True)
class CommandWorkload(Unremembered):
    """Any command, run on the head inside ``working_dir`` (shipped with the job).

    With ``telemetry`` (and then ``run_dir``), samplers record every node around it
    (``rtk telemetry record``, ``rtk profile``); without, it is a plain job
    (``rtk launch``). ``env`` is added to the command's environment.
    """

    argv: tuple[str, ...]
    working_dir: str = "."
    env: Mapping[str, str] = field(default_factory=dict)
    run_dir: str | None = None
    telemetry: TelemetryOptions | None = None
    name: str = "launch"
    stall: WatchSettings | None = None  # with telemetry: watch its ranks for stalls
    power: PowerSettings | None = None  # with telemetry: set its GPUs' power limits

    def check(self) -> None:
        """Its telemetry options, when it has them."""
        if self.telemetry is not None:
            self.telemetry.check()

    def job_request(self, plan: ClusterPlan, stamp: int, ship_code: bool) -> JobRequest:
        """Recorded: ``toolkit.telemetry.record_job`` around it; plain: the command itself."""
        if self.telemetry is not None:
            return recorded_request(plan, self, "record", stamp, ship_code)
        env = working_dir_env(self.working_dir, self.run_dir, str(state_root()))
        if self.env:
            env["env_vars"] = dict(self.env)
        name = f"rtk-{self.name}-{plan.inventory.name}-{stamp}"
        return JobRequest(
            "command", shlex.join(self.argv), env, name, plan.dashboard_url, self.run_dir
        )


def recorded_request(
    plan: ClusterPlan, workload: CommandWorkload, kind: str, stamp: int, ship_code: bool
) -> JobRequest:
    """The job that runs ``workload``'s command under telemetry, as a ``kind`` job."""
    run_dir = workload.run_dir or "."
    telemetry = workload.telemetry or TelemetryOptions()
    entrypoint, env = record_job(
        plan,
        list(workload.argv),
        run_dir,
        telemetry,
        workload.working_dir,
        workload.env,
        ship_code,
        workload.stall,
        workload.power,
    )
    name = f"rtk-record-{Path(run_dir).name}-{stamp}"
    return JobRequest(kind, entrypoint, env, name, plan.dashboard_url, run_dir)
