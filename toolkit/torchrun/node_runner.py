"""One node's torchrun, run by a Ray actor pinned to that node (a Ray worker).

The actor answers what the driver must know before anything starts (``facts``: the
node's name, whether the script is there, whether the rendezvous port is free), then
runs torchrun as a child in its own process group (``start``), streams its output
into the actor's stdout (which Ray forwards to the job's log, as it does a Ray Train
worker's), and reports its exit status (``wait``). ``stop`` ends the group: SIGTERM
(torchrun passes it to its ranks), then SIGKILL after a grace period. The child also
gets SIGTERM when the actor's process dies (``PR_SET_PDEATHSIG``), so a killed driver
leaves no ranks behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import ray

from toolkit.torchrun.failure import FailureReader

_PR_SET_PDEATHSIG = 1
STOP_GRACE_S = 15.0


@dataclass(frozen=True)
class NodeFacts:
    """What one node says before its torchrun starts.

    Attributes:
        node: The node's inventory name (``RTK_NODE``), else its hostname.
        ip: The address Ray knows it by.
        script_found: The script is there (relative to the job's working directory).
        port_taken: Some process listens on the rendezvous port (asked on the head only).
    """

    node: str
    ip: str
    script_found: bool
    port_taken: bool


def port_taken(port: int) -> bool:
    """Whether binding ``port`` on every address fails because it is in use."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError:
            return True
    return False


def child_env(
    base: Mapping[str, str], rtk_env: Mapping[str, str], user_env: Mapping[str, str]
) -> dict[str, str]:
    """The ranks' environment: the node's (Ray's worker's), rtk's, then the user's ``--env``.

    rtk's source is put on ``PYTHONPATH`` (the ranks import ``toolkit.markers``), and an
    empty ``CUDA_VISIBLE_DEVICES`` (what Ray gives an actor that asked for no GPU) is
    dropped so the ranks see the node's GPUs.
    """
    env = dict(base)
    if env.get("CUDA_VISIBLE_DEVICES") == "":
        del env["CUDA_VISIBLE_DEVICES"]
    source = str(Path(__file__).resolve().parents[2])
    paths = [source, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.update(rtk_env)
    env.update(user_env)
    return env


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the actor's process dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class TorchrunNode:
    """Runs torchrun on the node it is pinned to (as ``TorchrunActor``).

    The actor is made with ``max_concurrency`` above 1: ``stop`` is called while
    ``wait`` blocks.
    """

    def __init__(self) -> None:
        self._child: subprocess.Popen[bytes] | None = None
        self._pump: threading.Thread | None = None
        self._failures = FailureReader()

    def facts(self, script: str, check_script: bool, rdzv_port: int | None) -> NodeFacts:
        """The node's name and address, the script's presence, the port (None: not asked)."""
        found = not check_script or Path(script).is_file()
        taken = rdzv_port is not None and port_taken(rdzv_port)
        return NodeFacts(
            os.environ.get("RTK_NODE") or socket.gethostname(),
            ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
            found,
            taken,
        )

    def start(
        self, argv: Sequence[str], rtk_env: Mapping[str, str], user_env: Mapping[str, str]
    ) -> int:
        """Start ``argv`` with this node's Python (the Ray worker's) in ``child_env``.

        Returns:
            The child's pid; its output goes to this actor's stdout.
        """
        self._child = subprocess.Popen(  # noqa: S603 - the user's own torchrun command
            [sys.executable, *argv],
            env=child_env(os.environ, rtk_env, user_env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl only, no locks taken
        )
        self._pump = threading.Thread(target=self._copy_output, daemon=True)
        self._pump.start()
        return self._child.pid

    def _copy_output(self) -> None:
        child = self._child
        if child is None or child.stdout is None:
            return
        for line in iter(child.stdout.readline, b""):
            text = line.decode("utf-8", "replace")
            sys.stdout.write(text)
            sys.stdout.flush()
            self._failures.feed(text)

    def failure(self) -> str | None:
        """The first rank torchrun saw fail here, in one line (None: none reported).

        Asked once ``wait`` has returned: the output is read to its end by then.
        """
        found = self._failures.failure()
        return found.describe() if found is not None else None

    def wait(self) -> int:
        """Block until torchrun ends; its exit status (negative: the signal that ended it)."""
        if self._child is None:
            return 0
        code = self._child.wait()
        if self._pump is not None:
            self._pump.join(timeout=5.0)
        return code

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """End torchrun and its ranks: SIGTERM, then SIGKILL after ``grace_s``.

        Returns:
            Its exit status, or None when it had not started.
        """
        child = self._child
        if child is None:
            return None
        # torchrun starts each rank in a session of its own: they are found as its
        # descendants now, while it still lives to be their parent.
        ranks = descendants(child.pid)
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
        # The ranks may outlive torchrun itself: the whole group goes, and every rank,
        # a stopped one too (SIGKILL ends it; SIGTERM would wait for a SIGCONT).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        for pid in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return child.wait()


def descendants(pid: int, proc: str = "/proc") -> list[int]:
    """The processes below ``pid`` (children, theirs...), from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc, entry, "stat"), encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        # "PID (COMMAND) STATE PPID ...": the command may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        nxt = todo.pop()
        found.append(nxt)
        todo.extend(children.get(nxt, []))
    return found


# The actor: its class name is the prefix Ray puts on the lines it forwards.
TorchrunActor = ray.remote(num_cpus=0, max_restarts=0)(TorchrunNode)
