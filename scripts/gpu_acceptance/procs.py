"""Processes with a time limit, each in its own process group, killed whole on expiry.

Every process started here is tracked until it ends, so ``kill_all`` (a stage's SIGTERM
handler) takes down each one's group: they are in groups of their own, which killing
the stage's group would not reach.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any


@dataclass(frozen=True)
class Done:
    """A finished command.

    Attributes:
        argv: What ran.
        rc: Its exit status (negative: the signal that ended it; None: never started).
        stdout: What it printed.
        stderr: What it printed on stderr (or why it did not start).
        duration_s: How long it ran.
        timed_out: Whether it was killed for running past its limit.
    """

    argv: list[str]
    rc: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """Exit status 0 within the time limit."""
        return self.rc == 0 and not self.timed_out

    def why(self, chars: int = 600) -> str:
        """One message for a failure: how it ended and the end of its output."""
        if self.rc is None:
            return f"{self.argv[0]} did not start: {self.stderr}"
        end = "timed out" if self.timed_out else f"exited {self.rc}"
        text = tail((self.stderr.strip() or self.stdout.strip()), chars)
        return f"{' '.join(self.argv[:3])}... {end}" + (f": {text}" if text else "")


def last_line(text: str) -> str:
    """The last non-empty line of ``text`` (an error's message ends a traceback)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def tail(text: str, chars: int) -> str:
    """The last ``chars`` characters of ``text`` (marked when cut)."""
    return text if len(text) <= chars else "..." + text[-chars:]


_LIVE: set[subprocess.Popen[Any]] = set()


def kill_all(grace_s: float = 2.0) -> None:
    """Kill the group of every process started here that still runs."""
    for proc in list(_LIVE):
        if proc.poll() is None:
            kill_group(proc, grace_s)
        _LIVE.discard(proc)


def kill_group(proc: subprocess.Popen[Any], grace_s: float = 5.0) -> None:
    """SIGTERM the process's group, then SIGKILL it if it is still there after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run(
    argv: Sequence[str],
    timeout_s: float,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    stdin: IO[Any] | None = None,
) -> Done:
    """Run ``argv`` to its end or ``timeout_s``; its output captured as text."""
    began = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as e:
        return Done(list(argv), None, "", str(e), 0.0)
    _LIVE.add(proc)
    try:
        out, err = proc.communicate(timeout=max(timeout_s, 0.1))
        timed_out = False
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        timed_out = True
    except BaseException:  # interrupted: take the whole group down with us
        kill_group(proc, 2.0)
        raise
    finally:
        _LIVE.discard(proc)
    return Done(list(argv), proc.returncode, out, err, time.monotonic() - began, timed_out)


class Background:
    """A process that runs beside the measurement until ``stop``.

    Its stdout goes to ``stdout_path``, or when None to a pipe that a thread reads into
    lines (``readline``, ``wait_for``, and what is left at ``stop``); its stderr goes to
    ``stderr_path`` (or nowhere).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        stdout_path: Path | None = None,
        stderr_path: Path | None = None,
    ) -> None:
        self.argv = list(argv)
        self._out = stdout_path.open("w", encoding="utf-8") if stdout_path else None
        self._err = stderr_path.open("w", encoding="utf-8") if stderr_path else None
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self._out if self._out else subprocess.PIPE,
            stderr=self._err if self._err else subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
        _LIVE.add(self.proc)
        self.started_wall_s = time.time()
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader: threading.Thread | None = None
        if self.proc.stdout is not None:
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    def running(self) -> bool:
        """Whether it has not ended yet."""
        return self.proc.poll() is None

    def readline(self, timeout_s: float) -> str | None:
        """The next line of its stdout, or None when it ended or took too long."""
        try:
            line = self._lines.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            return None
        if line is None:
            self._lines.put(None)  # stays ended for later calls
        return line

    def wait_for(self, prefix: str, timeout_s: float) -> str | None:
        """Read stdout lines until one starts with ``prefix``; that line, or None."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            line = self.readline(left)
            if line is None:
                return None
            if line.startswith(prefix):
                return line
        return None

    def stop(self, grace_s: float = 5.0, sig: signal.Signals = signal.SIGTERM) -> str:
        """End it (``sig`` to its group, then SIGKILL); the stdout lines not read yet."""
        if self.running():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            kill_group(self.proc, 0.0)
        left: list[str] = []
        if self._reader is not None:
            self._reader.join(5.0)
            while True:
                try:
                    line = self._lines.get_nowait()
                except queue.Empty:
                    break
                if line is None:
                    break
                left.append(line)
        for f in (self._out, self._err):
            if f is not None:
                f.close()
        _LIVE.discard(self.proc)
        return "".join(left)

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def parse_proc_stat(text: str) -> tuple[int, int]:
    """``(utime, stime)`` in clock ticks from a ``/proc/PID/stat`` line.

    The command name (field 2) is in parentheses and may hold spaces and parentheses,
    so the fields are counted from the last ``)``.
    """
    rest = text.rsplit(")", 1)[1].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(rest[11]), int(rest[12])


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        utime, stime = parse_proc_stat(f.read())
    return (utime + stime) / os.sysconf("SC_CLK_TCK")
