"""The host side of a sandbox's SLURM: munged and slurmctld, node states, stopping.

Both daemons run in the foreground as children of the process that creates the
sandbox (so it reaps them), their output appended to their log files; ``stop`` finds
them from the record or, when that is missing, by program and sandbox directory.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from toolkit.errors import SandboxError
from toolkit.sandbox import procs
from toolkit.sandbox.hostcheck import Which, find_tools
from toolkit.sandbox.names import Layout
from toolkit.sandbox.sandbox_json import SandboxRecord
from toolkit.sandbox.slurm.conf import SlurmLayout, cgroup_conf, slurm_conf, slurmd_log
from toolkit.sandbox.ssh_login import port_open

logger = logging.getLogger(__name__)

# Each program SLURM in the sandbox runs, with the Debian package that provides it.
TOOLS: dict[str, str] = {
    "munged": "munge",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sinfo": "slurm-client",
    "scontrol": "slurm-client",
}
DAEMONS = ("slurmctld", "munged")
# Node states in which a node can run jobs.
READY_STATES = frozenset({"idle", "mixed", "allocated", "completing"})


def find_slurm_tools(which: Which = shutil.which) -> dict[str, str]:
    """Each SLURM program's path, by name.

    Raises:
        SandboxError: One is missing (naming the packages and the script that installs them).
    """
    found, missing = find_tools(which, TOOLS)
    if missing:
        raise SandboxError(
            f"a sandbox with SLURM needs {', '.join(missing)}, not found on PATH: install "
            "the Debian packages slurm-wlm and munge (run scripts/system-packages.sh as root)"
        )
    return found


def check_port_free(port: int) -> None:
    """Refuse when TCP ``port`` is taken on this host (slurmctld listens on every address).

    Raises:
        SandboxError: Something already listens there.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise SandboxError(f"cannot probe TCP port {port}: {e}") from e
            raise SandboxError(
                f"TCP port {port}, the slurmctld port of this subnet, is already in use here; "
                "choose another subnet (--subnet)"
            ) from e


def write_files(layout: Layout, controller_host: str, cpus: int) -> SlurmLayout:
    """Write the munge key, slurm.conf and cgroup.conf, and make the state directory.

    Raises:
        SandboxError: A file or directory cannot be written.
    """
    paths = SlurmLayout.of(layout)
    try:
        for directory in (paths.munge_dir, paths.directory, paths.etc, paths.state):
            directory.mkdir(mode=0o755 if directory == paths.etc else 0o700)
        fd = os.open(paths.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as key:
            key.write(os.urandom(1024))
        paths.conf.write_text(slurm_conf(layout, controller_host, cpus), encoding="utf-8")
        paths.cgroup_conf.write_text(cgroup_conf(layout), encoding="utf-8")
    except OSError as e:
        raise SandboxError(f"cannot write the SLURM files of sandbox {layout.name}: {e}") from e
    return paths


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return f"{path} ends: {' | '.join(tail) or '(empty)'}"


def _wait_ready(
    what: str, pid: int, ready: Callable[[], bool], log: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if not procs.is_alive(pid):
            raise SandboxError(f"{what} ended at once; {_tail(log)}")
        if time.monotonic() > deadline:
            raise SandboxError(f"{what} was not ready within {timeout_s:g} s; {_tail(log)}")
        time.sleep(0.02)


def start_munged(paths: SlurmLayout, munged: str, timeout_s: float = 10.0) -> int:
    """Start the sandbox's munged and wait for its socket; return its PID.

    In the foreground munged logs to stderr, which goes to its log file.

    ``--force``: munged wants every directory above its socket open to all, and the
    sandbox directory is open to root only (only root uses the sandbox's SLURM).

    Raises:
        SandboxError: It did not start (with its log's last lines).
    """
    argv = [
        munged, "--foreground", "--force",
        f"--socket={paths.munge_socket}",
        f"--key-file={paths.munge_key}",
        f"--pid-file={paths.munged_pid_file}",
        f"--seed-file={paths.munged_seed}",
    ]  # fmt: skip
    pid = procs.spawn(argv, paths.munged_log, procs.NODE_ENV, "munged")
    _wait_ready("munged", pid, paths.munge_socket.exists, paths.munged_log, timeout_s)
    logger.info("munged PID %s on %s", pid, paths.munge_socket)
    return pid


def start_slurmctld(
    paths: SlurmLayout, slurmctld: str, address: str, timeout_s: float = 15.0
) -> int:
    """Start the sandbox's slurmctld and wait until it accepts TCP at ``address``.

    In the foreground (``-D``) slurmctld logs to stderr, which goes to its log file
    (slurm.conf names no SlurmctldLogFile, or each line would be there twice).

    Raises:
        SandboxError: It did not start (with its log's last lines).
    """
    argv = [slurmctld, "-D", "-f", str(paths.conf)]
    env = {**procs.NODE_ENV, "SLURM_CONF": str(paths.conf)}
    pid = procs.spawn(argv, paths.slurmctld_log, env, "slurmctld")

    def listening() -> bool:
        return port_open(address, paths.slurmctld_port, timeout_s=0.5)

    _wait_ready("slurmctld", pid, listening, paths.slurmctld_log, timeout_s)
    logger.info("slurmctld PID %s on %s:%s", pid, address, paths.slurmctld_port)
    return pid


def node_states(conf: Path, sinfo: str = "sinfo", timeout_s: float = 10.0) -> dict[str, str]:
    """Each node's state as ``sinfo`` reports it (``idle``, ``down*``, ...).

    Raises:
        SandboxError: sinfo failed or hung (slurmctld unreachable).
    """
    argv = [sinfo, "--noheader", "--Node", "--format=%N %T"]
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SandboxError(f"sinfo: {e}") from e
    if done.returncode != 0:
        raise SandboxError(f"sinfo: {done.stderr.strip() or f'exit {done.returncode}'}")
    states: dict[str, str] = {}
    for line in done.stdout.splitlines():
        words = line.split()
        if len(words) == 2:
            states[words[0]] = words[1].lower()
    return states


def wait_for_nodes(layout: Layout, record: SandboxRecord, sinfo: str, timeout_s: float) -> float:
    """Wait until every node's slurmd has registered and the node is idle; return seconds.

    Raises:
        SandboxError: Some node is not ready in time (with its state and slurmd log).
    """
    paths = SlurmLayout.of(layout)
    began = time.monotonic()
    states: dict[str, str] = {}
    while time.monotonic() - began < timeout_s:
        states = node_states(paths.conf, sinfo)
        if all(states.get(n.name) == "idle" for n in layout.nodes):
            return time.monotonic() - began
        time.sleep(0.1)
    bad = [n for n in record.nodes if states.get(n.name) != "idle"]
    details = "; ".join(
        f"{n.name} is {states.get(n.name, 'missing')}, "
        + _tail(Path(f"/proc/{n.init_pid}/root{slurmd_log(n.name)}"), 2)
        for n in bad
    )
    raise SandboxError(f"SLURM nodes not idle within {timeout_s:g} s: {details}")


def _program(pid: int) -> str:
    """The process's name (comm): ``slurmctld``, ``munged`` (its exe may be a ``-wlm`` alias)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def _mentions(pid: int, text: str) -> bool:
    try:
        return text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def find_daemons(directory: Path, record: SandboxRecord | None) -> dict[int, str]:
    """The live munged and slurmctld of the sandbox in ``directory``, PID -> program.

    From the record, and by program and a command line naming the sandbox directory
    (for a record lost or written before the PIDs were). slurmctld's children
    (slurmscriptd) come along.
    """
    wanted = [record.slurmctld_pid, record.munged_pid] if record else []
    pids = [pid for pid in wanted if pid and _program(pid) in DAEMONS and procs.is_alive(pid)]
    for entry in Path("/proc").iterdir():
        pid = int(entry.name) if entry.name.isdigit() else 0
        if pid and _program(pid) in DAEMONS and _mentions(pid, f"{directory}/"):
            pids.append(pid)
    found = {pid: _program(pid) for pid in dict.fromkeys(pids) if procs.is_alive(pid)}
    for pid, program in list(found.items()):
        if program == "slurmctld":
            for child in procs.children(pid):
                found.setdefault(child, "slurmscriptd")
    return found


def stop(directory: Path, record: SandboxRecord | None, timeout_s: float = 5.0) -> list[str]:
    """Stop the sandbox's slurmctld and munged (SIGTERM, then SIGKILL); return what ended.

    Raises:
        SandboxError: A process outlived SIGKILL.
    """
    found = find_daemons(directory, record)
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    survivors = procs.wait_gone(found, timeout_s)
    if survivors:
        logger.warning("SIGKILL to %s, alive %s s after SIGTERM", survivors, timeout_s)
        survivors = procs.kill_and_wait(survivors)
    procs.reap_starters(found)
    if survivors:
        raise SandboxError(f"SLURM daemons still alive after SIGKILL: {survivors}")
    return [f"{program} (PID {pid})" for pid, program in found.items()]
