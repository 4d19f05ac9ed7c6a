"""What ``rtk jobs``, ``rtk stop`` and ``rtk logs --ray`` print, at any width and any N."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.cli.output.jobs import (
    clock_text,
    collection_lines,
    cut,
    listing_footer,
    outcome_lines,
    render_jobs,
    size_text,
    stop_line,
)
from toolkit.jobs.client import JobInfo, JobListing, JobOutcome
from toolkit.lifecycle.ray_logs import LogsCollection, NodeLogs

LONG = "python -m openrlhf.cli.train_ppo_ray --actor_num_nodes 2 " + "--flag value " * 20
JOBS = (
    JobInfo("rtk-launch-c-1718000100", "RUNNING", LONG, 1_718_000_100.0),
    JobInfo(
        "rtk-launch-c-1718000000", "SUCCEEDED", "python x.py", 1_718_000_000.0, 1_718_000_050.0
    ),
    JobInfo("raysubmit_pending", "PENDING", "sleep\n10"),
)


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_every_line_fits_the_screen_and_the_entrypoint_is_what_is_cut(width: int) -> None:
    lines = render_jobs(JOBS, width)
    assert lines[0].split() == ["SUBMISSION", "ID", "STATUS", "STARTED", "ENDED", "ENTRYPOINT"]
    fixed = len("rtk-launch-c-1718000100  SUCCEEDED  ") + 2 * len("01-31 23:59:59  ")
    for line in lines:
        assert len(line) <= max(width, fixed + 12), line
    running = lines[1]
    assert running.startswith("rtk-launch-c-1718000100  RUNNING    ")
    assert clock_text(1_718_000_100.0) in running
    assert running.endswith("...")  # the long entrypoint, cut to what is left
    assert lines[2].endswith("python x.py")
    assert lines[3].split()[-2:] == ["sleep", "10"]  # one line per job, always
    assert " - " in lines[3]  # not started, not ended


def test_an_entrypoint_keeps_a_readable_minimum_on_a_narrow_screen() -> None:
    line = render_jobs(JOBS[:1], 20)[1]
    assert line.endswith(cut(LONG, 12)) and len(cut(LONG, 12)) == 12


def test_cut_marks_what_it_cut() -> None:
    assert cut("abcdef", 6) == "abcdef"
    assert cut("abcdefg", 6) == "abc..."
    assert cut("a\n b", 10) == "a b"


def test_the_footer_says_how_many_more_and_how_to_see_them() -> None:
    shown = JobListing(JOBS, 57)
    assert listing_footer(shown, "c", "rtk jobs inv.yaml") == (
        "3 newest of 57 jobs; rtk jobs inv.yaml --all for every one"
    )
    assert listing_footer(JobListing(JOBS, 3), "c", "rtk jobs") is None
    assert listing_footer(JobListing((), 0), "c", "rtk jobs") == (
        "no jobs on cluster c yet (rtk launch submits one)"
    )


def test_stop_lines() -> None:
    stopped = JobInfo("j", "STOPPED", start_s=1.0, end_s=2.0)
    assert stop_line(stopped, True, 45) == "job j STOPPED"
    assert stop_line(JobInfo("j", "SUCCEEDED"), False, 45) == "job j had already ended: SUCCEEDED"
    assert stop_line(JobInfo("j", "RUNNING"), True, 45) == (
        "job j still RUNNING 45 s after it was asked to stop"
    )


def test_a_thousand_nodes_collected_print_one_line_and_a_line_per_cause() -> None:
    nodes = {
        f"n{i:04d}": NodeLogs(f"n{i:04d}", 10, 1 << 20, 1 << 18, left_out=3 if i < 5 else 0)
        for i in range(990)
    }
    errors = {
        f"n{i:04d}": f"n{i:04d}: ssh: connect to 10.0.{i // 256}.{i % 256}" for i in range(990, 998)
    }
    errors |= {"n0998": "n0998: FileNotFoundError: no /tmp/rtk-c on this node", "n0999": "n0999: x"}
    collection = LogsCollection(Path("bug.tar.gz"), True, 64 << 20, nodes, errors)
    summary, notes = collection_lines(collection)
    assert summary == (
        "logs of 990 of 1000 node(s), 990.0 MiB, in bug.tar.gz (a tarball, a folder per node)"
    )
    assert notes[0].startswith("rtk: left out on 5 node(s): 15 file(s), 0 B (over the 64.0 MiB")
    assert notes[1] == "rtk: not collected: 10 node(s), 3 cause(s)"
    assert notes[2] == "      8 node(s) n[0990-0997]: ssh: connect to <address>"
    assert len(notes) == 5


def test_sizes_read_in_binary_units() -> None:
    assert [size_text(n) for n in (0, 1023, 1024, 5 << 20, 3 << 30, 1 << 42)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "5.0 MiB",
        "3.0 GiB",
        "4096.0 GiB",
    ]


def test_a_failed_job_says_why_under_the_line_with_its_run_dir() -> None:
    """A job whose runtime env failed never ran: Ray's message is the only reason there is."""
    failed = JobOutcome("rtk-record-skip-1", "FAILED", 3.8, "runtime_env setup failed: x\n")
    assert outcome_lines(failed, "/runs/skip") == [
        "job rtk-record-skip-1 FAILED after 3.8 s; run dir /runs/skip",
        "runtime_env setup failed: x",
    ]
    done = JobOutcome("rtk-launch-1", "SUCCEEDED", 12.0, "Job finished successfully.")
    assert outcome_lines(done) == ["job rtk-launch-1 SUCCEEDED after 12.0 s"]
