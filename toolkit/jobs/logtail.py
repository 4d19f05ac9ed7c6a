"""Follow a Ray job's log as a stream, with bounded work per poll.

Ray's ``JobSubmissionClient.tail_job_logs`` streams the log over a websocket from its
first byte; it runs here in a thread of its own and hands chunks to the caller's
loop, which prints whole lines. The stream can stop silently while the job runs
(ray#51601): then it is opened again, at most ``MAX_RESTARTS`` times, skipping what
was already printed. When the job has ended and the stream did not end cleanly, the
log is fetched once, whole, and what the stream missed is printed. So a job's log is
read about once, twice at worst, however long it runs (the old loop fetched the whole
log every second: work that grew with the square of its length).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

# Opening the stream again re-reads the log from its start (the skipped part costs as
# much as reading it): a few times at most, then the rest comes at the job's end.
MAX_RESTARTS = 3
# After the job ended, how long the stream has to deliver its last chunks and close.
END_GRACE_S = 10.0
# Ray's SDK logs every closed stream at INFO on the user's terminal.
_RAY_SDK_LOGGER = "ray.dashboard.modules.job.sdk"


class _Stream:
    """One ``tail_job_logs`` stream, pumped by a daemon thread into a queue."""

    def __init__(self, client: Any, job_id: str) -> None:
        self.chunks: queue.Queue[str | None] = queue.Queue()
        self.error: BaseException | None = None
        self.ended = False
        self._client = client
        self._job_id = job_id
        threading.Thread(target=self._run, name=f"rtk-log-{job_id}", daemon=True).start()

    def _run(self) -> None:
        try:
            asyncio.run(self._pump())
        except BaseException as e:  # noqa: BLE001 - kept, and answered by a full fetch
            self.error = e
        finally:
            self.chunks.put(None)

    async def _pump(self) -> None:
        async for chunk in self._client.tail_job_logs(self._job_id):
            self.chunks.put(chunk)


class LogFollower:
    """Prints a job's log through ``echo``, line by line, as it grows.

    Attributes:
        received_chars: Characters this follower took from Ray (stream and fetch),
            including what a reopened stream re-sent: the work done, for tests.
    """

    def __init__(self, client: Any, job_id: str, echo: Callable[[str], None]) -> None:
        logging.getLogger(_RAY_SDK_LOGGER).setLevel(logging.WARNING)
        self._client = client
        self._job_id = job_id
        self._echo = echo
        self._consumed = 0  # characters of the log taken so far (printed or pending)
        self._pending = ""  # the last, unfinished line
        self._restarts = 0
        self.received_chars = 0
        self._stream: _Stream | None = _Stream(client, job_id)
        self._skip = 0  # characters a reopened stream re-sends before new ones

    def poll(self, wait_s: float, job_running: Callable[[], bool]) -> None:
        """Print what arrived within ``wait_s``; reopen a stream that stopped early.

        ``job_running`` is asked only when the stream has ended: a stream that ends
        with its job is complete, one that ends before it is opened again. Without a
        stream (given up on) it waits ``wait_s``: the caller's loop never spins.
        """
        stream = self._stream
        if stream is None:
            time.sleep(wait_s)
            return
        try:
            chunk = stream.chunks.get(timeout=wait_s)
        except queue.Empty:
            return
        while True:
            if chunk is None:
                stream.ended = True
                break
            self._take(chunk)
            try:
                chunk = stream.chunks.get_nowait()
            except queue.Empty:
                return
        if not job_running():
            return  # finish() takes it from here
        if self._restarts < MAX_RESTARTS:
            self._restarts += 1
            self._skip = self._consumed
            self._stream = _Stream(self._client, self._job_id)
        else:
            self._stream = None  # given up on streaming: the rest comes at the end

    def finish(self) -> None:
        """After the job ended: drain the stream, or fetch once what it missed."""
        stream = self._stream
        if stream is not None and not stream.ended:
            try:
                chunk = stream.chunks.get(timeout=END_GRACE_S)
                while chunk is not None:
                    self._take(chunk)
                    chunk = stream.chunks.get(timeout=END_GRACE_S)
                stream.ended = True
            except queue.Empty:
                pass
        clean = stream is not None and stream.ended and stream.error is None
        if not clean:
            logs = str(self._client.get_job_logs(self._job_id))
            self.received_chars += len(logs)
            self._skip = 0
            self._add(logs[self._consumed :])
        if self._pending:
            self._echo(self._pending)
            self._pending = ""

    def _take(self, chunk: str) -> None:
        self.received_chars += len(chunk)
        if self._skip:
            dropped = min(self._skip, len(chunk))
            self._skip -= dropped
            chunk = chunk[dropped:]
        self._add(chunk)

    def _add(self, text: str) -> None:
        if not text:
            return
        self._consumed += len(text)
        text = self._pending + text
        complete, _, self._pending = text.rpartition("\n")
        if complete:
            self._echo(complete)
