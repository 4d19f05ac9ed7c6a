"""A job's driver run as a process on this machine, the head, instead of through the Jobs API.

Ray's SLURM template starts the training program as a plain ``python`` on the head;
``rtk train`` submits it to Ray's Jobs API, whose supervisor is a fresh Ray worker
that imports Ray and sets up the runtime environment before the driver starts: about
4-7 s more to the first step. Inside a batch job rtk itself runs on the head, so it
can start the driver directly, as the template does. What that gives up: the job is
not the Jobs API's, so ``rtk logs`` and ``rtk stop`` do not reach it (``rtk jobs``
still lists it, as a driver Ray saw), and its log is the output of this command.

The driver gets what the Jobs API would give it: the env file ``rtk up`` wrote on the
node, the cluster's address and token file (``client_env.node_session_script``), the
job's ``env_vars``, and its ``working_dir`` as the current directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from toolkit.cluster.client_env import node_session_script
from toolkit.cluster.jobs import JOB_STOP_WAIT_S, JobOutcome
from toolkit.cluster.plan import ClusterPlan
from toolkit.errors import JobError

# The runtime environment's keys a local driver honours; any other (pip, conda,
# container...) needs Ray's runtime env agent, that is, the Jobs API.
LOCAL_RUNTIME_ENV_KEYS = ("env_vars", "working_dir", "py_modules")
# prctl(2): the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1


def is_local_address(address: str) -> bool:
    """True when ``address`` (an IP address or a host name) is this machine's.

    Binding a socket to an address succeeds only on one of this machine's own (in its
    network namespace), whatever its host name says. A name that does not resolve is
    not this machine.
    """
    try:
        infos = socket.getaddrinfo(address, None, type=socket.SOCK_DGRAM)
    except socket.gaierror:
        return False
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.bind((sockaddr[0], 0))
        except OSError as e:
            if e.errno in (errno.EADDRNOTAVAIL, errno.EINVAL, errno.EAFNOSUPPORT):
                continue
            raise
        return True
    return False


def local_driver_problem(runtime_env: Mapping[str, Any]) -> str | None:
    """Why ``runtime_env`` cannot be honoured by a local driver; None when it can."""
    other = sorted(set(runtime_env) - set(LOCAL_RUNTIME_ENV_KEYS))
    if not other:
        return None
    return (
        f"the job's runtime environment sets {', '.join(other)}, which only Ray's Jobs "
        "API provides; use --driver job"
    )


def run_local_driver(
    plan: ClusterPlan,
    entrypoint: str,
    runtime_env: Mapping[str, Any],
    name: str,
    echo: Callable[[str], None],
) -> JobOutcome:
    """Run ``entrypoint`` here with the job's environment; its output through ``echo``.

    Args:
        plan: The cluster, whose head this machine is.
        entrypoint: The shell command of the job.
        runtime_env: The job's runtime environment (``LOCAL_RUNTIME_ENV_KEYS`` only).
        name: The job's name, as ``JobOutcome.job_id``.
        echo: Receives each line the driver prints (stdout and stderr together).

    Raises:
        JobError: The runtime environment needs the Jobs API, or the driver cannot start.
        KeyboardInterrupt: Interrupted; the driver got SIGINT (Ray Train then stops its
            workers and the telemetry is collected) and was waited for, at most
            ``JOB_STOP_WAIT_S``, then killed.
    """
    problem = local_driver_problem(runtime_env)
    if problem:
        raise JobError(f"cannot run {name} as a local driver: {problem}")
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in dict(runtime_env.get("env_vars") or {}).items()})
    # A shipped module (rtk's own source) is imported from where it lies here.
    parents = [os.path.dirname(os.path.abspath(m)) for m in runtime_env.get("py_modules") or ()]
    if parents:
        env["PYTHONPATH"] = os.pathsep.join([*parents, *filter(None, [env.get("PYTHONPATH")])])
    script = node_session_script(plan, ["bash", "-c", entrypoint])
    cwd = str(runtime_env.get("working_dir") or os.getcwd())
    echo(f"rtk: running {name} here, on the head, as a local process (not a Ray job)")
    began = time.monotonic()
    try:
        # Its own session: a signal for rtk (an sbatch teardown's SIGINT, Ctrl-C at a
        # terminal) reaches the driver once, from here, not twice.
        driver = subprocess.Popen(
            ["bash", "-c", script],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
            preexec_fn=_end_with_parent,
        )
    except OSError as e:
        raise JobError(f"cannot start {name} here: {e}") from e
    assert driver.stdout is not None
    reader = threading.Thread(target=_echo_lines, args=(driver.stdout, echo), daemon=True)
    try:
        # Started inside the try: Ctrl-C may come as soon as the driver prints.
        reader.start()
        code = driver.wait()
    except KeyboardInterrupt:
        echo(f"rtk: stopping {name} (SIGINT, then up to {JOB_STOP_WAIT_S} s)")
        _stop(driver)
        reader.join(timeout=30.0)
        raise
    reader.join()
    elapsed_s = time.monotonic() - began
    if code == 0:
        return JobOutcome(name, "SUCCEEDED", elapsed_s)
    return JobOutcome(name, "FAILED", elapsed_s, f"the driver exited with status {code}")


def _end_with_parent() -> None:
    """In the driver, before it runs: SIGTERM when rtk dies (Linux's parent-death signal).

    Were rtk killed (SIGKILL after an sbatch teardown's grace), the driver, in its own
    session, would otherwise train on unseen.
    """
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _echo_lines(stream: IO[str], echo: Callable[[str], None]) -> None:
    with stream:
        for line in stream:
            echo(line.rstrip("\n"))


def _stop(driver: subprocess.Popen[str]) -> None:
    """SIGINT to the driver's process group; SIGKILL when it has not ended in time."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(driver.pid, signal.SIGINT)
    try:
        driver.wait(timeout=JOB_STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
