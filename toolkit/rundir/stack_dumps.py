"""A rank's Python stacks on request: faulthandler, registered when it starts writing markers.

The stall watchdog reads a rank's stack with py-spy, which needs ptrace permission
over the rank (Yama's ``ptrace_scope`` 1, the usual default, refuses it to a process
that is not the rank's ancestor, as a Ray task is not). Where it has none it asks the
rank itself: it sends ``STACK_SIGNAL`` and reads what faulthandler appends to
``RunDir.stack_dump(rank)``. ``MarkerWriter`` (through which every process that writes
markers goes: rtk's trainer, ``toolkit.markers``) calls ``register_stack_dumps`` once
per process, and it writes a registration line there first::

    # rtk stack dumps: pid=1234 thread=139811505765248 signal=12

naming the process and the thread that opened the marker stream (``threading.get_ident``,
the id both faulthandler and py-spy print): under Ray Train the training loop runs in
a thread of its own, not the main one. The reader sends the signal only to a pid with
such a line, whose kernel state (``/proc/PID/status`` SigCgt) says it catches the
signal: a process that does not would be killed by it.

SIGUSR2: SIGUSR1 is taken (Lightning's SLURM requeue, SLURM ``--signal`` setups, Ray
Tune); neither Ray's workers, torch (torchrun forwards USR1/USR2 to its workers only
when told to), NCCL, DeepSpeed, Accelerate nor Transformers handle SIGUSR2 (Ray's
dashboard agent uses it for its own faulthandler dump, in that process only).

The previous handler is chained to only when there is one (the signal is caught):
chaining to the default action of SIGUSR2 would end the process. A forked child (a
DataLoader worker) drops the registration, so a stray signal finds in it what it
would without rtk, and nothing writes into its parent's file. A failure to register
is silent: markers never stop training.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import re
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

STACK_SIGNAL = signal.SIGUSR2
_LINE = "# rtk stack dumps: pid={pid} thread={thread} signal={signal}\n"
_LINE_RE = re.compile(r"^# rtk stack dumps: pid=(\d+) thread=(\d+)", re.MULTILINE)

_registered_pid: int | None = None  # the process that registered (a fork child is not it)
_file: IO[str] | None = None  # kept open for the process's life: faulthandler writes to its fd


@dataclass(frozen=True)
class Registration:
    """A process's registration line in its rank's stack dump file.

    Attributes:
        pid: The process.
        thread_id: The thread that opened its marker stream (``threading.get_ident``).
    """

    pid: int
    thread_id: int


def register_stack_dumps(path: Path) -> bool:
    """Dump every thread's stack to ``path`` on ``STACK_SIGNAL``, once per process.

    Returns:
        True when registered now; False when this process already is, or it failed.
    """
    global _registered_pid, _file
    if _registered_pid == os.getpid():
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        file = path.open("a", encoding="utf-8")
        chain = catches_signal("self", STACK_SIGNAL)
        faulthandler.register(STACK_SIGNAL, file=file, all_threads=True, chain=chain is not False)
        file.write(registration_line(os.getpid(), threading.get_ident()))
        file.flush()
    except Exception:  # noqa: BLE001 - markers never stop training
        return False
    _registered_pid, _file = os.getpid(), file
    return True


def registration_line(pid: int, thread_id: int) -> str:
    """The line a registration writes into the dump file."""
    return _LINE.format(pid=pid, thread=thread_id, signal=int(STACK_SIGNAL))


def registrations(text: str) -> list[Registration]:
    """The registration lines in a dump file's text, in file order."""
    return [Registration(int(m[1]), int(m[2])) for m in _LINE_RE.finditer(text)]


def registration(path: Path, pid: int) -> Registration | None:
    """The last registration of ``pid`` in the dump file ``path`` (None: none, or no file)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = [r for r in registrations(text) if r.pid == pid]
    return found[-1] if found else None


def catches_signal(pid: int | str, signum: int) -> bool | None:
    """Whether process ``pid`` (or ``"self"``) has a handler for ``signum``, from its kernel state.

    Reads ``SigCgt`` of ``/proc/PID/status``; where that cannot be read, this process's
    own Python view (``signal.getsignal``: a Python handler, or one set outside Python).

    Returns:
        True or False; None when it cannot be known (another process, no /proc).
    """
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError):
        pass
    if pid != "self":
        return None
    return signal.getsignal(signum) not in (signal.SIG_DFL, signal.SIG_IGN)


def _forget_in_child() -> None:
    """In a forked child: restore the handler rtk's registration replaced."""
    global _registered_pid, _file
    if _registered_pid is None or _registered_pid == os.getpid():
        return
    with contextlib.suppress(Exception):  # a child that keeps it writes a dump, no more
        faulthandler.unregister(STACK_SIGNAL)
    _registered_pid, _file = None, None


os.register_at_fork(after_in_child=_forget_in_child)
