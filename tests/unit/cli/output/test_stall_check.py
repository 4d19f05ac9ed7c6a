"""What ``rtk stall-check`` shows of its job's log: the job's own lines, its record, its refusal."""

from __future__ import annotations

import json

import pytest

from toolkit.cli.output.stall_check import CheckLog
from toolkit.errors import JobError
from toolkit.jobs.client import JobOutcome
from toolkit.stall.records import StallRecord, Suspect
from toolkit.stall.settings import CHECK_PREFIX, CHECK_RECORD_PREFIX, CHECK_REFUSED

RECORD = StallRecord(
    detected_wall_s=1.7e9,
    step=41,
    stalled_s=95.0,
    timeout_s=0.0,
    summary="stalled at step 41 for 95 s: rank 5 (n2) is stopped (SIGSTOP or a debugger)",
    groups={"stopped (SIGSTOP or a debugger)": 1},
    suspects=(Suspect("n2", "stopped (SIGSTOP or a debugger)", 5),),
    action="check",
)


def test_the_jobs_own_lines_are_shown_as_they_come_and_rays_are_not() -> None:
    shown: list[str] = []
    log = CheckLog(shown.append)
    log.feed("2026-01-01 12:00:00,000 INFO worker.py:1 -- Connecting to existing Ray cluster")
    log.feed(f"{CHECK_PREFIX}step 41 finished 95 s ago\n{CHECK_PREFIX}  1 rank is stopped\n")
    log.feed(CHECK_RECORD_PREFIX + json.dumps(RECORD.to_json()))
    assert shown == ["step 41 finished 95 s ago", "  1 rank is stopped"]
    assert log.lines == shown
    assert log.record("job-1") == RECORD


def test_a_refusal_is_kept_for_the_error_not_shown() -> None:
    shown: list[str] = []
    log = CheckLog(shown.append)
    refusal = f"{CHECK_REFUSED}/runs/r1: no such directory on the head (n1)"
    log.feed(CHECK_PREFIX + refusal)
    failed = JobOutcome("job-1", "FAILED", 2.0, "Job entrypoint command failed with exit code 1")
    assert shown == [] and log.failure(failed, "inv.yaml ") == refusal


def test_a_job_that_failed_unsaid_is_named_with_rays_word_and_where_its_log_is() -> None:
    log = CheckLog(lambda line: None)
    log.feed(f"{CHECK_PREFIX}step 41 finished 95 s ago")
    failed = JobOutcome("job-1", "FAILED", 2.0, "Job entrypoint command failed\nwith exit code 1")
    assert log.failure(failed, "--local ") == (
        "the stall-check job job-1 ended FAILED: Job entrypoint command failed with exit "
        "code 1; rtk logs --local job-1 shows its log"
    )
    assert log.failure(JobOutcome("job-2", "STOPPED", 1.0)) == (
        "the stall-check job job-2 ended STOPPED; rtk logs job-2 shows its log"
    )


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        ([], "the stall-check job job-1 printed no record"),
        ([CHECK_RECORD_PREFIX + "{not json"], "printed a broken record"),
        ([CHECK_RECORD_PREFIX + json.dumps({"v": 1, "step": 3})], "printed a broken record"),
    ],
)
def test_a_missing_or_broken_record_is_the_jobs_error(lines: list[str], error: str) -> None:
    log = CheckLog(lambda line: None)
    for line in lines:
        log.feed(line)
    with pytest.raises(JobError, match=error):
        log.record("job-1")
