"""A node's processes on the host: start its init, find it, enter it, end it."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from toolkit.errors import SandboxError
from toolkit.sandbox import cpu_share
from toolkit.sandbox.names import NodeLayout

logger = logging.getLogger(__name__)

# The environment a node's init starts with (sshd builds each session's own).
NODE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}

# The unshare processes this Python process started, so destroy can reap them.
_STARTERS: dict[int, subprocess.Popen[bytes]] = {}


def spawn(argv: Sequence[str], log_file: Path, env: Mapping[str, str], what: str) -> int:
    """Start ``argv`` in a new session, output appended to ``log_file``; return its PID.

    It is remembered so that ``reap_starters`` in this process collects its exit status.

    Raises:
        SandboxError: It cannot be started (``what`` names it in the message).
    """
    try:
        with log_file.open("ab") as log:
            child = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd="/",
                env=dict(env),
                start_new_session=True,
            )
    except OSError as e:
        raise SandboxError(f"{what}: cannot start {argv[0]}: {e}") from e
    _STARTERS[child.pid] = child
    return child.pid


def start_node(node: NodeLayout, tools: dict[str, str]) -> int:
    """Start the node's init detached from this process; return the starter's PID.

    The starter is ``ip netns exec NS unshare --pid --fork ... tini -s -- bash INIT``;
    after ``exec``s it is the ``unshare`` process, whose child is the node's PID 1.
    Where the host allows it, it first joins the node's own CPU share (``cpu_share``).

    Raises:
        SandboxError: The command cannot be started.
    """
    argv = [
        tools["ip"], "netns", "exec", node.netns,
        tools["unshare"], "--pid", "--fork", "--mount", "--uts", "--mount-proc",
        "--propagation", "private",
        tools["tini"], "-s", "--", "bash", str(node.init_script),
    ]  # fmt: skip
    return spawn(cpu_share.wrap(argv, node), node.log_file, NODE_ENV, f"{node.name}: its init")


def children(pid: int) -> list[int]:
    """PIDs of the direct children of ``pid`` (none when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text(encoding="ascii")
        return [int(word) for word in text.split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def _status_field(pid: int, key: str) -> str | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            if line.startswith(f"{key}:"):
                return line.split(":", 1)[1].strip()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and is neither a zombie nor dead."""
    state = _status_field(pid, "State")
    return state is not None and not state.startswith(("Z", "X"))


def is_node_init(pid: int, netns: str) -> bool:
    """True when ``pid`` is alive, PID 1 of its PID namespace, and inside ``netns``."""
    nspid = _status_field(pid, "NSpid")
    if not is_alive(pid) or nspid is None or nspid.split()[-1] != "1":
        return False
    try:
        ours = os.stat(f"/run/netns/{netns}")
        theirs = os.stat(f"/proc/{pid}/ns/net")
    except OSError:
        return False
    return (ours.st_dev, ours.st_ino) == (theirs.st_dev, theirs.st_ino)


def find_init(node: NodeLayout, starter_pid: int, timeout_s: float = 10.0) -> int:
    """The host PID of the node's init: the starter's child that is PID 1 of its namespace.

    Raises:
        SandboxError: The starter ended, or no init appeared in time.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in children(starter_pid):
            if is_node_init(child, node.netns):
                return child
        if not is_alive(starter_pid):
            raise SandboxError(f"{node.name}: its init ended at once; {log_tail(node)}")
        time.sleep(0.01)
    raise SandboxError(f"{node.name}: no init process appeared in {timeout_s:.0f} s")


def log_tail(node: NodeLayout, lines: int = 2) -> str:
    """The last lines of the node's log, on one line, for an error message."""
    try:
        text = node.log_file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return f"{node.log_file} ends: {' | '.join(tail) or '(empty)'}"


def wait_gone(pids: Iterable[int], timeout_s: float) -> list[int]:
    """Wait until no PID is alive, at most ``timeout_s``; return those still alive."""
    left = [pid for pid in pids if is_alive(pid)]
    deadline = time.monotonic() + timeout_s
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = [pid for pid in left if is_alive(pid)]
    return left


def kill_and_wait(pids: Iterable[int], timeout_s: float = 5.0) -> list[int]:
    """SIGKILL each PID and wait until they are gone; return those still alive after."""
    pids = [pid for pid in pids if is_alive(pid)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return wait_gone(pids, timeout_s)


def reap_starters(pids: Iterable[int], timeout_s: float = 5.0) -> None:
    """Collect the exit status of starters this process started (so no zombie stays)."""
    for pid in pids:
        starter = _STARTERS.pop(pid, None)
        if starter is None:
            continue
        try:
            starter.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            logger.warning("starter %s did not end in %s s", pid, timeout_s)


def nsenter_argv(init_pid: int, argv: Sequence[str]) -> list[str]:
    """Command line running ``argv`` in the namespaces of the node whose init is ``init_pid``."""
    return ["nsenter", "-t", str(init_pid), "-m", "-u", "-n", "-p", "-w", "--", *argv]


def run_in(
    init_pid: int, argv: Sequence[str], timeout_s: float, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` inside a node and wait for it; output is captured as text.

    Raises:
        SandboxError: It could not be started, or ran past ``timeout_s`` (it is then killed).
    """
    full = nsenter_argv(init_pid, argv)
    try:
        proc = subprocess.Popen(
            full,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except OSError as e:
        raise SandboxError(f"cannot run {' '.join(full)}: {e}") from e
    try:
        out, err = proc.communicate(input_text, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise SandboxError(f"{' '.join(argv)} ran past {timeout_s:g} s in the node") from e
    return subprocess.CompletedProcess(full, proc.returncode, out, err)
