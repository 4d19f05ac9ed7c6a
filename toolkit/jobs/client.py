"""Ray jobs on a cluster rtk brought up: submit, follow, list, stop; thin over Ray's Jobs API.

The log is streamed (``logtail.py``) while rtk polls the job's status; when the job
has ended, whatever the stream missed is fetched once, so nothing is lost. ``run_job``
stops the job on Ctrl-C before rtk exits; ``follow_job`` (``rtk logs -f``) only stops
following. Ray's errors become rtk's here: an unknown job id is a ``JobError`` that
names it, an unreachable or refusing Jobs API a ``ClusterError``.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from toolkit.cluster.plan import ClusterPlan
from toolkit.errors import ClusterError, JobError, StateError
from toolkit.jobs.logtail import LogFollower
from toolkit.json_types import JsonObject
from toolkit.state.store import StateStore

POLL_S = 1.0
# How long a stopped job's entrypoint has between SIGTERM and SIGKILL (set per job as
# RAY_JOB_STOP_WAIT_TIME_S: telemetry is collected in that time), and how long rtk
# waits for the job to end after asking it to stop.
JOB_STOP_WAIT_S = 30
STOP_WAIT_S = JOB_STOP_WAIT_S + 15.0
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
# Jobs ``rtk jobs`` shows unless asked for all.
LIST_LIMIT = 20
# A submission id already taken (two submissions in the same second) gets -2, -3...
SUBMIT_TRIES = 5

T = TypeVar("T")


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


@dataclass(frozen=True)
class JobInfo:
    """One job as the Jobs API describes it.

    Attributes:
        job_id: The submission id (what ``rtk logs``, ``rtk stop`` and ``ray job``
            take), or Ray's job id for a driver started outside the Jobs API.
        status: PENDING, RUNNING, STOPPED, SUCCEEDED or FAILED.
        entrypoint: The command the job runs.
        start_s: When it started, in seconds since the epoch (None: not yet).
        end_s: When it ended (None: it has not).
        message: Ray's word on its state ("Job finished successfully.").
        submitted: False for a driver Ray saw but the Jobs API did not start.
    """

    job_id: str
    status: str
    entrypoint: str = ""
    start_s: float | None = None
    end_s: float | None = None
    message: str = ""
    submitted: bool = True

    @property
    def ended(self) -> bool:
        """True in a terminal state."""
        return self.status in TERMINAL

    def duration_s(self, now_s: float) -> float | None:
        """Seconds from its start to its end, or to ``now_s`` while it runs."""
        if self.start_s is None:
            return None
        return max(0.0, (self.end_s if self.end_s is not None else now_s) - self.start_s)

    def to_json(self) -> JsonObject:
        """A JSON-ready dict."""
        return {
            "job_id": self.job_id,
            "status": self.status,
            "entrypoint": self.entrypoint,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "message": self.message,
            "submitted": self.submitted,
        }

    @classmethod
    def from_details(cls, details: Any) -> JobInfo:
        """From Ray's ``JobDetails`` (times in ms since the epoch)."""
        submission_id = getattr(details, "submission_id", None)
        return cls(
            job_id=str(submission_id or details.job_id),
            status=_status_name(details.status),
            entrypoint=str(details.entrypoint or ""),
            start_s=_seconds(details.start_time),
            end_s=_seconds(details.end_time),
            message=str(details.message or ""),
            submitted=submission_id is not None,
        )


@dataclass(frozen=True)
class JobListing:
    """Some of a cluster's jobs, newest first, and how many it has in all."""

    jobs: tuple[JobInfo, ...]
    total: int


@dataclass(frozen=True)
class StopOutcome:
    """What ``stop_job`` saw: the job's state at the end, and whether it was running."""

    info: JobInfo
    was_running: bool


# What Ray's Jobs SDK reads from the environment over the address and token it is
# given: left from ``eval "$(rtk env OTHER --export)"`` or a user's own habits, they
# would send this cluster's job, or another cluster's token, elsewhere.
CLIENT_ENV = (
    "RAY_API_SERVER_ADDRESS",
    "RAY_ADDRESS",
    "RAY_AUTH_MODE",
    "RAY_AUTH_TOKEN",
    "RAY_AUTH_TOKEN_PATH",
)
_CLIENT_ENV_LOCK = threading.Lock()


@contextlib.contextmanager
def _without_client_env() -> Iterator[None]:
    """``CLIENT_ENV`` out of this process's environment while a client is made."""
    with _CLIENT_ENV_LOCK:
        saved = {name: os.environ.pop(name) for name in CLIENT_ENV if name in os.environ}
        try:
            yield
        finally:
            os.environ.update(saved)


def job_client(plan: ClusterPlan, store: StateStore) -> Any:
    """A JobSubmissionClient for the head's dashboard, with the cluster's token.

    Ray's own variables in this environment (``CLIENT_ENV``) are not heeded: the
    client talks to ``plan``'s head with ``plan``'s token only.

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
        with _without_client_env():
            return JobSubmissionClient(plan.dashboard_url, headers=headers)
    except Exception as e:  # noqa: BLE001 - Ray raises plain exceptions for all of these
        raise ClusterError(f"the Jobs API at {plan.dashboard_url} does not answer: {e}") from e


def submit_job(
    client: Any,
    entrypoint: str,
    runtime_env: JsonObject,
    submission_id: str,
    renumber: bool = True,
) -> str:
    """Submit a job; its submission id.

    Args:
        client: The Jobs API client (``job_client``).
        entrypoint: The shell command the job runs.
        runtime_env: Its Ray runtime environment.
        submission_id: The id asked for.
        renumber: When the id is taken (two submissions within the same second), try
            ``-2``, ``-3``... after it; False: a taken id is an error (one the user gave).

    Raises:
        ClusterError: The Jobs API refused it (the reason is Ray's).
    """
    tries = SUBMIT_TRIES if renumber else 1
    for attempt in range(1, tries + 1):
        wanted = submission_id if attempt == 1 else f"{submission_id}-{attempt}"
        try:
            return str(
                client.submit_job(
                    entrypoint=entrypoint, runtime_env=runtime_env, submission_id=wanted
                )
            )
        except RuntimeError as e:
            if "already exists" not in str(e) or attempt == tries:
                raise ClusterError(f"the Jobs API refused job {wanted}: {_reason(e)}") from e
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def run_job(
    client: Any,
    entrypoint: str,
    runtime_env: JsonObject,
    submission_id: str,
    echo: Callable[[str], None],
    renumber: bool = True,
) -> JobOutcome:
    """Submit, stream the logs through ``echo``, and return once the job has ended.

    ``renumber`` is ``submit_job``'s: whether a taken id gets ``-2``, ``-3``...

    Raises:
        KeyboardInterrupt: Interrupted; the job was stopped first (at most
            ``STOP_WAIT_S`` waited for it to end).
    """
    began = time.monotonic()
    job_id = submit_job(client, entrypoint, runtime_env, submission_id, renumber)
    status = _follow(client, job_id, echo, stop_on_interrupt=True)
    info = client.get_job_info(job_id)
    return JobOutcome(job_id, status, time.monotonic() - began, str(info.message or ""))


def follow_job(client: Any, job_id: str, echo: Callable[[str], None]) -> JobInfo:
    """Print the job's log through ``echo`` until it has ended; its final state.

    Ctrl-C (KeyboardInterrupt) stops following and leaves the job running.

    Raises:
        JobError: No such job.
        ClusterError: The Jobs API failed.
    """
    job_info(client, job_id)  # an unknown id is named before anything is followed
    _follow(client, job_id, echo, stop_on_interrupt=False)
    return job_info(client, job_id)


def _follow(
    client: Any,
    job_id: str,
    echo: Callable[[str], None],
    stop_on_interrupt: bool,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Stream the job's log until it ends; its final status.

    The status is asked at most once every ``POLL_S``, however fast the log comes: a
    job printing a line per step would otherwise cost an HTTP request to the head's
    dashboard per chunk of its log, for as long as it runs.
    """
    follower = LogFollower(client, job_id, echo)
    status = "PENDING"
    asked_at = -POLL_S

    def running() -> bool:
        nonlocal status, asked_at
        status = _status(client, job_id)
        asked_at = clock()
        return status not in TERMINAL

    try:
        running()
        while status not in TERMINAL:
            follower.poll(POLL_S, running)
            if clock() - asked_at >= POLL_S:
                running()
    except KeyboardInterrupt:
        if not stop_on_interrupt:
            raise
        echo(f"rtk: stopping job {job_id}")
        client.stop_job(job_id)
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline and running():
            follower.poll(POLL_S, running)
        follower.finish()
        raise
    follower.finish()
    return status


def job_info(client: Any, job_id: str) -> JobInfo:
    """The job's state now.

    Raises:
        JobError: No such job.
        ClusterError: The Jobs API failed.
    """
    return _api(job_id, lambda: JobInfo.from_details(client.get_job_info(job_id)))


def job_log(client: Any, job_id: str) -> str:
    """The job's whole log so far.

    Raises:
        JobError: No such job.
        ClusterError: The Jobs API failed.
    """
    return _api(job_id, lambda: str(client.get_job_logs(job_id)))


def list_jobs(client: Any, limit: int | None = LIST_LIMIT) -> JobListing:
    """The jobs submitted to the cluster, newest first, at most ``limit`` (None: all).

    Drivers Ray saw but the Jobs API did not start (a ``ray.init()`` in a notebook,
    rtk's own status probes) are left out: they have no log or stop of their own.

    Raises:
        ClusterError: The Jobs API failed.
    """
    details = _api(None, lambda: list(client.list_jobs()))
    jobs = [JobInfo.from_details(d) for d in details]
    submitted = newest_first([j for j in jobs if j.submitted])
    shown = submitted if limit is None else submitted[:limit]
    return JobListing(tuple(shown), len(submitted))


def stop_job(
    client: Any,
    job_id: str,
    wait_s: float = STOP_WAIT_S,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> StopOutcome:
    """Ask Ray to stop the job, then wait up to ``wait_s`` for it to end.

    Returns:
        Its state at the end: terminal, or still running when ``wait_s`` passed.

    Raises:
        JobError: No such job.
        ClusterError: The Jobs API failed.
    """
    before = job_info(client, job_id)
    if before.ended:
        return StopOutcome(before, was_running=False)
    _api(job_id, lambda: client.stop_job(job_id))
    deadline = clock() + wait_s
    info = job_info(client, job_id)
    while not info.ended and clock() < deadline:
        sleep(poll_s)
        info = job_info(client, job_id)
    return StopOutcome(info, was_running=True)


def is_unknown_job(error: BaseException) -> bool:
    """True when Ray's error says the job does not exist (HTTP 404)."""
    text = str(error)
    return "status code 404" in text or "does not exist" in text


def _api(job_id: str | None, call: Callable[[], T]) -> T:
    """``call()`` with Ray's errors made rtk's."""
    try:
        return call()
    except RuntimeError as e:
        if job_id is not None and is_unknown_job(e):
            raise JobError(f"no job {job_id!r} on this cluster") from e
        raise ClusterError(f"the Jobs API failed: {_reason(e)}") from e
    except OSError as e:  # requests' connection errors are OSErrors
        raise ClusterError(f"the Jobs API does not answer: {_reason(e)}") from e
    except Exception as e:  # noqa: BLE001 - Ray's AuthenticationError and kin
        if type(e).__name__ != "AuthenticationError":
            raise
        raise ClusterError(f"the Jobs API refused rtk's token: {_reason(e)}") from e


def _reason(error: BaseException) -> str:
    """Ray's message on one line, without its HTTP preamble."""
    text = " ".join(str(error).split())
    return text.split(": ", 1)[1] if text.startswith("Request failed with status") else text


def _status(client: Any, job_id: str) -> str:
    return _status_name(client.get_job_status(job_id))


def _status_name(status: Any) -> str:
    """``JobStatus.RUNNING`` (or ``"RUNNING"``) as ``RUNNING``."""
    return str(getattr(status, "value", status)).rsplit(".", 1)[-1]


def _seconds(ms: Any) -> float | None:
    return None if ms is None else float(ms) / 1000.0


def newest_first(jobs: Sequence[JobInfo]) -> list[JobInfo]:
    """``jobs`` by start time, the newest (and those not started) first."""
    return sorted(
        jobs, key=lambda j: j.start_s if j.start_s is not None else math.inf, reverse=True
    )
