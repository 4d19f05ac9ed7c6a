"""Ray jobs on a cluster rtk brought up: submit, follow the logs, end with the real status.

The log is streamed (``logtail.py``) while rtk polls the job's status; when the job
has ended, whatever the stream missed is fetched once, so nothing is lost. Ctrl-C
stops the job before rtk exits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolkit.cluster.logtail import LogFollower
from toolkit.cluster.plan import ClusterPlan
from toolkit.cluster.state import StateStore
from toolkit.errors import ClusterError, StateError

POLL_S = 1.0
# How long a stopped job's entrypoint has between SIGTERM and SIGKILL (set per job as
# RAY_JOB_STOP_WAIT_TIME_S: telemetry is collected in that time), and how long rtk
# waits for the job to end after asking it to stop.
JOB_STOP_WAIT_S = 30
STOP_WAIT_S = JOB_STOP_WAIT_S + 15.0
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


@dataclass
class JobOutcome:
    """How a job ended."""

    job_id: str
    status: str
    duration_s: float
    message: str = ""

    @property
    def ok(self) -> bool:
        """True when the job succeeded."""
        return self.status == "SUCCEEDED"


def job_client(plan: ClusterPlan, store: StateStore) -> Any:
    """A JobSubmissionClient for the head's dashboard, with the cluster's token.

    Raises:
        StateError: Token auth is on and this machine has no token for the cluster.
        ClusterError: The dashboard does not answer.
    """
    from ray.job_submission import JobSubmissionClient

    headers: dict[str, str] = {}
    if plan.auth:
        token = store.read_token()
        if token is None:
            raise StateError(
                f"no token for cluster {plan.inventory.name} on this machine "
                f"({store.token_file}); bring it up with rtk up from here"
            )
        headers["Authorization"] = f"Bearer {token}"
    try:
        return JobSubmissionClient(plan.dashboard_url, headers=headers)
    except Exception as e:  # noqa: BLE001 - Ray raises plain exceptions for all of these
        raise ClusterError(f"the Jobs API at {plan.dashboard_url} does not answer: {e}") from e


def run_job(
    client: Any,
    entrypoint: str,
    runtime_env: dict[str, Any],
    submission_id: str,
    echo: Callable[[str], None],
) -> JobOutcome:
    """Submit, stream the logs through ``echo``, and return once the job has ended."""
    began = time.monotonic()
    job_id = client.submit_job(
        entrypoint=entrypoint, runtime_env=runtime_env, submission_id=submission_id
    )
    follower = LogFollower(client, job_id, echo)
    status = "PENDING"

    def running() -> bool:
        nonlocal status
        status = _status(client, job_id)
        return status not in TERMINAL

    try:
        running()
        while status not in TERMINAL:
            follower.poll(POLL_S, running)
            status = _status(client, job_id)
    except KeyboardInterrupt:
        echo(f"rtk: stopping job {job_id}")
        client.stop_job(job_id)
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline and running():
            follower.poll(POLL_S, running)
        follower.finish()
        raise
    follower.finish()
    info = client.get_job_info(job_id)
    return JobOutcome(job_id, status, time.monotonic() - began, str(info.message or ""))


def _status(client: Any, job_id: str) -> str:
    return str(client.get_job_status(job_id)).rsplit(".", 1)[-1]
