"""A rank's Python stack, innermost frame first: py-spy, else the rank's own faulthandler.

py-spy reads the process's memory from outside (``py-spy dump --nonblocking --json``:
the rank is never paused, and a stopped rank is read all the same); it needs ptrace
permission over the rank. Without it (or without py-spy) the rank is asked to dump
its stacks itself: ``toolkit.rundir.markers`` registered faulthandler on
``STACK_SIGNAL`` when it began to write markers, into ``RunDir.stack_dump(rank)``. A
stopped process cannot run its handler, nor a zombie: those are not asked.

Of a rank's threads the one kept is the one that opened its marker stream (its
registration line names it; under Ray Train that is the training loop's thread),
else the main thread: py-spy names it ``MainThread``; faulthandler names no thread,
so it is the thread whose outermost frame is a script's ``<module>`` or runpy's
``_run_module_as_main`` (every other thread starts in threading's ``_bootstrap``), else
the current thread (the one that ran the handler: the kernel gives a process's signal
to its main thread unless that blocks it), else the first.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from toolkit.rundir.markers import STACK_SIGNAL, catches_signal, registration
from toolkit.stall.proc_state import process_state
from toolkit.stall.records import GONE, STOPPED, ZOMBIE, Frame

PY_SPY, FAULTHANDLER, NO_STACK = "py-spy", "faulthandler", "none"
# How often the dump file is looked at while the rank writes its stacks.
_POLL_S = 0.01
_ERROR_CHARS = 300
_THREAD_RE = re.compile(r"^(Current thread|Thread) 0x([0-9a-fA-F]+)")
_FRAME_RE = re.compile(r'^  File "(.*)", line (\d+|\?\?\?) in (.*)$')
_MAIN_ENTRIES = ("<module>", "_run_module_as_main")


@dataclass(frozen=True)
class StackRead:
    """One attempt at a rank's stack.

    Attributes:
        frames: Its thread's stack, innermost first (empty when none was read).
        source: ``py-spy``, ``faulthandler``, or ``none`` (neither could).
        error: Why no stack was read, in one line (None when one was).
    """

    frames: tuple[Frame, ...] = ()
    source: str = NO_STACK
    error: str | None = None


def py_spy_binary() -> str | None:
    """py-spy beside this Python (ray[default] installs it there), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def py_spy_stack(pid: int, timeout_s: float, thread_id: int | None = None) -> StackRead:
    """``pid``'s stack by ``py-spy dump --nonblocking --json``, killed past ``timeout_s``.

    Args:
        pid: The rank's process.
        timeout_s: How long py-spy may take.
        thread_id: The thread to keep (``threading.get_ident`` in the rank), if known.
    """
    binary = py_spy_binary()
    if binary is None:
        return StackRead(source=PY_SPY, error="py-spy not found (beside python, nor on PATH)")
    command = [binary, "dump", "--pid", str(pid), "--nonblocking", "--json"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return StackRead(source=PY_SPY, error=f"py-spy took over {timeout_s:g} s (killed)")
    except OSError as e:
        return StackRead(source=PY_SPY, error=f"py-spy did not start: {e}")
    if done.returncode != 0:
        return StackRead(source=PY_SPY, error=f"py-spy: {py_spy_error(done.stderr)}")
    try:
        frames = parse_py_spy_json(done.stdout, pid, thread_id)
    except ValueError as e:
        return StackRead(source=PY_SPY, error=f"py-spy: {e}")
    if not frames:
        return StackRead(source=PY_SPY, error="py-spy: no Python frames")
    return StackRead(frames, PY_SPY)


def parse_py_spy_json(text: str, pid: int, thread_id: int | None = None) -> tuple[Frame, ...]:
    """The kept thread's frames from ``py-spy dump --json``'s output (see the module).

    Raises:
        ValueError: It is not py-spy's list of threads.
    """
    try:
        threads = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e})") from e
    if not isinstance(threads, list) or not all(isinstance(t, dict) for t in threads):
        raise ValueError("not a list of threads")
    if not threads:
        return ()
    kept = _kept_thread(threads, pid, thread_id)
    frames = kept.get("frames")
    if not isinstance(frames, list):
        raise ValueError("a thread without frames")
    return tuple(
        Frame(str(f.get("name", "?")), str(f.get("filename", "?")), int(f.get("line") or 0))
        for f in frames
        if isinstance(f, dict)
    )


def _kept_thread(
    threads: list[dict[str, object]], pid: int, thread_id: int | None
) -> dict[str, object]:
    """The marker stream's thread, else ``MainThread``, else the pid's own, else the first."""
    for key, value in (
        ("thread_id", thread_id),
        ("thread_name", "MainThread"),
        ("os_thread_id", pid),
    ):
        for thread in threads:
            if value is not None and thread.get(key) == value:
                return thread
    return threads[0]


def py_spy_error(stderr: str) -> str:
    """py-spy's complaint in one line: its error and causes, without the backtrace."""
    lines = []
    for line in stderr.splitlines():
        if line.strip().startswith("Stack backtrace"):
            break
        if line.strip() and line.strip() != "Caused by:":
            lines.append(line.strip())
    return ("; ".join(lines) or "failed, saying nothing")[:_ERROR_CHARS]


def faulthandler_stack(pid: int, dump_path: str | Path, timeout_s: float) -> StackRead:
    """Ask ``pid`` to dump its stacks into ``dump_path``; read the new dump, ``timeout_s`` at most.

    Only a pid registered in ``dump_path`` (``toolkit.rundir.markers``) that catches
    ``STACK_SIGNAL`` is sent it: any other would be killed by it.
    """
    path = Path(dump_path)
    registered = registration(path, pid)
    if registered is None:
        return _failed(f"pid {pid} registered no stack dumps in {path}")
    if catches_signal(pid, STACK_SIGNAL) is False:
        return _failed(f"pid {pid} no longer catches {STACK_SIGNAL.name}")
    try:
        size = path.stat().st_size
        os.kill(pid, STACK_SIGNAL)
    except OSError as e:
        return _failed(f"cannot signal pid {pid}: {e}")
    text = _wait_for_dump(path, size, time.monotonic() + timeout_s)
    if not text:
        return _failed(f"no stack written within {timeout_s:g} s")
    frames = parse_faulthandler(text, registered.thread_id)
    if not frames:
        return _failed("the dump holds no Python frames")
    return StackRead(frames, FAULTHANDLER)


def _failed(error: str) -> StackRead:
    return StackRead(source=FAULTHANDLER, error=error)


def _wait_for_dump(path: Path, size: int, deadline_s: float) -> str:
    """What is appended to ``path`` past ``size`` once it stops growing (or at the deadline)."""
    seen = size
    while time.monotonic() < deadline_s:
        time.sleep(_POLL_S)
        now = path.stat().st_size
        if now > size and now == seen:  # grew, then held still for a poll: written
            break
        seen = now
    with path.open("rb") as dump:
        dump.seek(size)
        return dump.read().decode("utf-8", errors="replace")


def parse_faulthandler(text: str, thread_id: int | None = None) -> tuple[Frame, ...]:
    """The kept thread's frames from a faulthandler dump (see the module for which).

    ``text`` holds one dump, or more (the last one's block of a thread counts): blocks
    ``Thread 0x... (most recent call first):`` (``Current thread`` for the one that ran
    the handler, ``Stack`` for a dump of one thread), then ``  File "x", line N in f``.
    """
    threads: dict[int, list[Frame]] = {}
    current: int | None = None
    frames: list[Frame] | None = None
    for line in text.splitlines():
        header = _THREAD_RE.match(line)
        if header is not None or line.startswith("Stack (most recent call first)"):
            ident = int(header[2], 16) if header is not None else 0
            frames = threads[ident] = []
            if header is None or header[1] == "Current thread":
                current = ident
            continue
        frame = _FRAME_RE.match(line)
        if frame is not None and frames is not None:
            number = int(frame[2]) if frame[2].isdigit() else 0
            frames.append(Frame(frame[3], frame[1], number))
        elif not line.startswith("  "):
            frames = None  # a blank line or anything else ends the block
    if not threads:
        return ()
    if thread_id is not None and thread_id in threads:
        return tuple(threads[thread_id])
    for stack in threads.values():
        if stack and stack[-1].function in _MAIN_ENTRIES:
            return tuple(stack)
    if current is not None:
        return tuple(threads[current])
    return tuple(next(iter(threads.values())))


def rank_stack(pid: int, dump_path: str | Path, timeout_s: float, py_spy: bool = True) -> StackRead:
    """``pid``'s stack: py-spy (when ``py_spy``), else faulthandler; ``timeout_s`` in all.

    A stopped or zombie process cannot run a signal handler: it is not asked.
    """
    deadline_s = time.monotonic() + timeout_s
    registered = registration(Path(dump_path), pid)
    errors = []
    if py_spy:
        thread_id = registered.thread_id if registered is not None else None
        read = py_spy_stack(pid, timeout_s, thread_id)
        if read.error is None:
            return read
        errors.append(read.error)
    state = process_state(pid)
    if state in (STOPPED, ZOMBIE, GONE):
        errors.append(f"faulthandler: not asked, the process is {state}")
    else:
        left_s = deadline_s - time.monotonic()
        read = faulthandler_stack(pid, dump_path, max(left_s, _POLL_S * 5))
        if read.error is None:
            return read
        errors.append(f"faulthandler: {read.error}")
    return StackRead(source=NO_STACK, error="; ".join(errors)[:_ERROR_CHARS])
