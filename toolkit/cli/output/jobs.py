"""What ``rtk jobs``, ``rtk logs`` and ``rtk stop`` print: pure functions of their results."""

from __future__ import annotations

import time
from collections.abc import Sequence

from toolkit.cluster.node_groups import group_nodes, render_failure_groups
from toolkit.jobs.client import JobInfo, JobListing, JobOutcome
from toolkit.lifecycle.ray_logs import LogsCollection

COLUMNS = ("SUBMISSION ID", "STATUS", "STARTED", "ENDED", "ENTRYPOINT")
MIN_ENTRYPOINT_CHARS = 12
TIME_FORMAT = "%m-%d %H:%M:%S"
_TIME_CHARS = len("01-31 23:59:59")


def clock_text(seconds: float | None) -> str:
    """``05-01 12:03:04`` in this machine's time zone, ``-`` for none."""
    return time.strftime(TIME_FORMAT, time.localtime(seconds)) if seconds is not None else "-"


def cut(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters (``...`` where cut)."""
    line = " ".join(text.split())
    if len(line) <= width:
        return line
    return line[: max(0, width - 3)] + "..." if width > 3 else line[:width]


def render_jobs(jobs: Sequence[JobInfo], width: int) -> list[str]:
    """A header and a line per job; the entrypoint cut to fit ``width`` columns."""
    id_chars = max([len(COLUMNS[0]), *(len(j.job_id) for j in jobs)])
    status_chars = max([len(COLUMNS[1]), *(len(j.status) for j in jobs)])
    fixed = id_chars + status_chars + 2 * _TIME_CHARS + 4 * 2
    room = max(MIN_ENTRYPOINT_CHARS, width - fixed)

    def row(cells: Sequence[str]) -> str:
        job_id, status, started, ended, entrypoint = cells
        return (
            f"{job_id:<{id_chars}}  {status:<{status_chars}}  {started:<{_TIME_CHARS}}  "
            f"{ended:<{_TIME_CHARS}}  {cut(entrypoint, room)}"
        ).rstrip()

    lines = [row(COLUMNS)]
    for job in jobs:
        lines.append(
            row(
                (
                    job.job_id,
                    job.status,
                    clock_text(job.start_s),
                    clock_text(job.end_s),
                    job.entrypoint,
                )
            )
        )
    return lines


def listing_footer(listing: JobListing, cluster: str, again: str) -> str | None:
    """The line under the table: none shown, or how many more there are."""
    if listing.total == 0:
        return f"no jobs on cluster {cluster} yet (rtk launch submits one)"
    if len(listing.jobs) < listing.total:
        return f"{len(listing.jobs)} newest of {listing.total} jobs; {again} --all for every one"
    return None


def stop_line(info: JobInfo, was_running: bool, wait_s: float) -> str:
    """What ``rtk stop`` says about the job's state at the end."""
    if not was_running:
        return f"job {info.job_id} had already ended: {info.status}"
    if info.ended:
        return f"job {info.job_id} {info.status}"
    return f"job {info.job_id} still {info.status} {wait_s:g} s after it was asked to stop"


def outcome_lines(outcome: JobOutcome, run_dir: str | None = None) -> list[str]:
    """How a job rtk followed ended, with its run directory when there is one.

    Ray's message follows when it failed: a job whose runtime environment could not
    be set up never runs its entrypoint, and that message is all there is to say why.
    """
    where = f"; run dir {run_dir}" if run_dir else ""
    lines = [f"job {outcome.job_id} {outcome.status} after {outcome.duration_s:.1f} s{where}"]
    if not outcome.ok and outcome.message:
        lines.append(outcome.message.strip())
    return lines


def ended_lines(info: JobInfo, now_s: float) -> list[str]:
    """How a job ``rtk logs -f`` followed ended."""
    took = info.duration_s(now_s)
    after = f" after {took:.1f} s" if took is not None else ""
    lines = [f"job {info.job_id} {info.status}{after}"]
    if info.status != "SUCCEEDED" and info.message:
        lines.append(info.message.strip())
    return lines


def size_text(size_bytes: float) -> str:
    """``12.3 MiB``: bytes in binary units."""
    value = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def collection_lines(collection: LogsCollection) -> tuple[str, list[str]]:
    """``rtk logs --ray``'s summary line, and the lines for stderr: what was left out, failures."""
    got = len(collection.nodes)
    asked = got + len(collection.errors)
    what = "a tarball, a folder per node" if collection.tarball else "a folder per node"
    summary = (
        f"logs of {got} of {asked} node(s), {size_text(collection.file_bytes)}, "
        f"in {collection.out} ({what})"
    )
    notes: list[str] = []
    capped = [n for n in collection.nodes.values() if n.left_out]
    if capped:
        files = sum(n.left_out for n in capped)
        size = sum(n.left_out_bytes for n in capped)
        notes.append(
            f"rtk: left out on {len(capped)} node(s): {files} file(s), {size_text(size)} "
            f"(over the {size_text(collection.max_bytes_per_node)} cap or older than "
            "--since; the newest kept); each node's COLLECTION.txt lists them"
        )
    groups = group_nodes(collection.errors.items())
    notes += render_failure_groups(groups, "rtk: not collected")
    return summary, notes
