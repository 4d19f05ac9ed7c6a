"""The job-log follower's failure paths, against a scripted Jobs API client.

The real stream is tested against Ray in test_local_cluster.py; what Ray cannot be
made to do on demand (a stream that stops while the job runs, one that breaks) is
scripted here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from toolkit.jobs import logtail
from toolkit.jobs.logtail import LogFollower


class ScriptedClient:
    """A job whose log is ``lines``; each stream stops after ``stream_lines[i]`` lines."""

    def __init__(self, log: str, stream_chunks: list[int | None], fail: bool = False) -> None:
        self.log = log
        self.stream_chunks = stream_chunks
        self.fail = fail
        self.streams = 0
        self.fetches = 0
        self.done = False  # the job has ended: set once a stream served the whole log

    async def tail_job_logs(self, job_id: str) -> AsyncIterator[str]:
        limit = self.stream_chunks[min(self.streams, len(self.stream_chunks) - 1)]
        self.streams += 1
        chunks = [self.log[i : i + 7] for i in range(0, len(self.log), 7)]
        for chunk in chunks[:limit]:
            yield chunk
        self.done = self.done or limit is None
        if self.fail:
            raise RuntimeError("WebSocket connection closed unexpectedly")

    def get_job_logs(self, job_id: str) -> str:
        self.fetches += 1
        return self.log


LOG = "".join(f"line {i} of the job\n" for i in range(40)) + "no newline at the end"


def follow(client: ScriptedClient, polls: int) -> list[str]:
    """Poll ``polls`` times while the job runs until a stream served the whole log."""
    printed: list[str] = []
    follower = LogFollower(client, "job", printed.append)
    for _ in range(polls):
        follower.poll(0.2, lambda: not client.done)
    follower.finish()
    return printed


def test_a_clean_stream_prints_every_line_once_and_fetches_nothing() -> None:
    client = ScriptedClient(LOG, [None])
    printed = follow(client, 3)
    assert "\n".join(printed) == LOG
    assert client.fetches == 0 and client.streams == 1


def test_a_stream_that_stops_while_the_job_runs_is_reopened_after_what_was_printed() -> None:
    client = ScriptedClient(LOG, [10, 30, None])
    printed = follow(client, 6)
    assert "\n".join(printed) == LOG  # nothing twice, nothing lost
    assert client.streams == 3 and client.fetches == 0


def test_after_the_restarts_the_rest_is_fetched_once_at_the_end() -> None:
    client = ScriptedClient(LOG, [5])  # every stream stops after 5 chunks
    printed = follow(client, 5 * (logtail.MAX_RESTARTS + 1))
    assert "\n".join(printed) == LOG
    assert client.streams == logtail.MAX_RESTARTS + 1 and client.fetches == 1


def test_a_broken_stream_is_answered_by_one_fetch() -> None:
    client = ScriptedClient(LOG, [12], fail=True)
    printed: list[str] = []
    follower = LogFollower(client, "job", printed.append)
    follower.poll(0.5, lambda: False)  # the job ended meanwhile: no reopening
    follower.finish()
    assert "\n".join(printed) == LOG
    assert client.fetches == 1 and client.streams == 1
