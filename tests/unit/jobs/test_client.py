"""Jobs over Ray's Jobs API: listing, stopping, unknown ids, taken submission ids.

Against a scripted Jobs API client that holds Ray's own ``JobDetails`` records and
fails with the errors Ray's SDK raises (its texts, as ``JobSubmissionClient`` words
them). The real API is exercised on the sandbox (tests/integration/test_jobs_cluster.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from ray.job_submission import JobDetails, JobStatus, JobType

from toolkit.errors import ClusterError, JobError
from toolkit.jobs.client import (
    POLL_S,
    JobInfo,
    _follow,
    job_info,
    job_log,
    list_jobs,
    stop_job,
    submit_job,
)


class JobsApi:
    """A cluster's jobs as Ray's dashboard keeps them; methods as JobSubmissionClient's."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobDetails] = {}
        self.logs: dict[str, str] = {}
        self.stop_after_polls: int | None = 0  # None: the job ignores the stop
        self.stop_requests = 0
        self.polls = 0

    def add(self, submission_id: str | None, status: JobStatus, start_s: float | None) -> None:
        key = submission_id or f"0{len(self.jobs) + 1}000000"
        self.jobs[key] = JobDetails(
            type=JobType.SUBMISSION if submission_id else JobType.DRIVER,
            job_id=f"0{len(self.jobs) + 1}000000",
            submission_id=submission_id,
            status=status,
            entrypoint=f"python {key}.py",
            start_time=None if start_s is None else int(start_s * 1000),
        )

    def _get(self, job_id: str) -> JobDetails:
        if job_id not in self.jobs:
            raise RuntimeError(
                f"Request failed with status code 404: Job {job_id} does not exist.."
            )
        return self.jobs[job_id]

    def submit_job(self, entrypoint: str, runtime_env: dict[str, Any], submission_id: str) -> str:
        if submission_id in self.jobs:
            raise RuntimeError(
                "Request failed with status code 400: Traceback (most recent call last):\n"
                f"ValueError: Job with submission_id {submission_id} already exists. "
                "Please use a different submission_id.\n."
            )
        self.add(submission_id, JobStatus.PENDING, 1.0)
        return submission_id

    def get_job_info(self, job_id: str) -> JobDetails:
        details = self._get(job_id)
        if self.stop_requests and details.status == JobStatus.RUNNING:
            self.polls += 1
            if self.stop_after_polls is not None and self.polls > self.stop_after_polls:
                details.status = JobStatus.STOPPED
        return details

    def get_job_logs(self, job_id: str) -> str:
        self._get(job_id)
        return self.logs.get(job_id, "")

    def list_jobs(self) -> list[JobDetails]:
        return list(self.jobs.values())

    def stop_job(self, job_id: str) -> bool:
        details = self._get(job_id)
        self.stop_requests += 1
        return details.status == JobStatus.RUNNING


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_listing_is_newest_first_bounded_and_without_bare_drivers() -> None:
    api = JobsApi()
    for i in range(30):
        api.add(f"rtk-launch-c-{i}", JobStatus.SUCCEEDED, 1000.0 + i)
    api.add(None, JobStatus.SUCCEEDED, 5000.0)  # a ray.init() driver: no log, no stop
    api.add("rtk-launch-c-pending", JobStatus.PENDING, None)
    listing = list_jobs(api, limit=5)
    assert listing.total == 31
    assert [j.job_id for j in listing.jobs] == [
        "rtk-launch-c-pending",
        "rtk-launch-c-29",
        "rtk-launch-c-28",
        "rtk-launch-c-27",
        "rtk-launch-c-26",
    ]
    assert len(list_jobs(api, limit=None).jobs) == 31


def test_ray_details_become_seconds_and_plain_status_names() -> None:
    details = JobDetails(
        type=JobType.SUBMISSION,
        job_id="02000000",
        submission_id="rtk-launch-c-1",
        status=JobStatus.FAILED,
        entrypoint="python -c 'raise SystemExit(3)'",
        message="Job entrypoint command failed with exit code 3",
        start_time=1_718_000_000_250,
        end_time=1_718_000_004_750,
    )
    info = JobInfo.from_details(details)
    assert info.status == "FAILED" and info.ended
    assert info.start_s == pytest.approx(1_718_000_000.25)
    assert info.duration_s(now_s=0) == pytest.approx(4.5)
    assert info.to_json()["job_id"] == "rtk-launch-c-1"


def test_an_unknown_job_is_named() -> None:
    api = JobsApi()
    for call in (job_info, job_log, stop_job):
        with pytest.raises(JobError, match="no job 'nope' on this cluster"):
            call(api, "nope")


def test_other_api_failures_are_cluster_errors_with_rays_reason() -> None:
    class Refusing(JobsApi):
        def list_jobs(self) -> list[JobDetails]:
            raise RuntimeError("Request failed with status code 500: GCS unavailable.")

    with pytest.raises(ClusterError, match="the Jobs API failed: GCS unavailable"):
        list_jobs(Refusing())


def test_stop_waits_until_the_job_has_ended() -> None:
    api, clock = JobsApi(), Clock()
    api.add("j", JobStatus.RUNNING, 1.0)
    api.stop_after_polls = 3
    stopped = stop_job(api, "j", wait_s=60, poll_s=1, clock=clock, sleep=clock.sleep)
    assert stopped.was_running and stopped.info.status == "STOPPED"
    assert api.stop_requests == 1
    assert clock.now == 3  # polled once a second until Ray said STOPPED


def test_stop_gives_up_after_its_bound_with_the_job_still_running() -> None:
    api, clock = JobsApi(), Clock()
    api.add("j", JobStatus.RUNNING, 1.0)
    api.stop_after_polls = None
    stopped = stop_job(api, "j", wait_s=10, poll_s=1, clock=clock, sleep=clock.sleep)
    assert stopped.was_running and stopped.info.status == "RUNNING"
    assert clock.now == 10


def test_stopping_a_job_that_ended_asks_ray_nothing() -> None:
    api = JobsApi()
    api.add("j", JobStatus.SUCCEEDED, 1.0)
    stopped = stop_job(api, "j")
    assert not stopped.was_running and stopped.info.status == "SUCCEEDED"
    assert api.stop_requests == 0


def test_a_taken_submission_id_gets_a_suffix() -> None:
    api = JobsApi()
    assert submit_job(api, "python a.py", {}, "rtk-launch-c-1") == "rtk-launch-c-1"
    assert submit_job(api, "python a.py", {}, "rtk-launch-c-1") == "rtk-launch-c-1-2"
    assert submit_job(api, "python a.py", {}, "rtk-launch-c-1") == "rtk-launch-c-1-3"
    # An id the user chose is theirs: taken, it is refused, not renamed.
    with pytest.raises(ClusterError, match="refused job rtk-launch-c-1: .*already exists"):
        submit_job(api, "python a.py", {}, "rtk-launch-c-1", renumber=False)


def test_a_refused_submission_says_rays_reason_on_one_line() -> None:
    class Refusing(JobsApi):
        def submit_job(
            self, entrypoint: str, runtime_env: dict[str, Any], submission_id: str
        ) -> str:
            raise RuntimeError(
                "Request failed with status code 400: runtime_env\nfield pip: not a list."
            )

    with pytest.raises(ClusterError) as refused:
        submit_job(Refusing(), "python a.py", {"pip": "x"}, "j")
    assert str(refused.value) == "the Jobs API refused job j: runtime_env field pip: not a list."


class ChattyJob:
    """A job whose log comes in ``chunks`` small pieces; it ends with its log."""

    def __init__(self, chunks: int) -> None:
        self.chunks = chunks
        self.sent = 0
        self.status_asks = 0

    async def tail_job_logs(self, job_id: str) -> Any:
        for i in range(self.chunks):
            self.sent += 1
            yield f"step {i}\n"

    def get_job_status(self, job_id: str) -> str:
        self.status_asks += 1
        return "SUCCEEDED" if self.sent >= self.chunks else "RUNNING"

    def get_job_logs(self, job_id: str) -> str:
        return "".join(f"step {i}\n" for i in range(self.chunks))


def test_a_chatty_log_does_not_make_a_status_request_per_chunk() -> None:
    """At most one status request per POLL_S of the follower's clock, whatever the log."""
    job = ChattyJob(500)
    now = [0.0]

    def clock() -> float:  # each read: a hundredth of POLL_S later
        now[0] += POLL_S / 100
        return now[0]

    printed: list[str] = []
    status = _follow(job, "j", printed.append, stop_on_interrupt=False, clock=clock)
    assert status == "SUCCEEDED"
    assert printed == [f"step {i}" for i in range(500)]
    # One read per loop turn at most, so at most a turn in a hundred asks: 500 chunks
    # asked once per chunk before.
    assert job.status_asks <= 500 // 100 + 3, job.status_asks
