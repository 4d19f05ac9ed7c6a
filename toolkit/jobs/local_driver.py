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
job's ``env_vars``, and its ``working_dir`` as the current directory. Its Ray workers
(Ray Train's ranks, a user's tasks) get the job's ``env_vars`` too, as the Jobs API's
supervisor gives them: through the job configuration ``ray.init()`` reads from the
driver's environment (``JOB_CONFIG_VARIABLE``). Without it the trainer's ranks ran
with no Flight Recorder under SLURM, where the driver runs here.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from toolkit.cluster.plan import ClusterPlan
from toolkit.credentials.client_env import node_session_script
from toolkit.driver_gate import GATE_STDIN, GATE_VARIABLE, GO_LINE
from toolkit.errors import JobError
from toolkit.jobs.client import JOB_STOP_WAIT_S, JobOutcome

# The runtime environment's keys a local driver honours; any other (pip, conda,
# container...) needs Ray's runtime env agent, that is, the Jobs API.
LOCAL_RUNTIME_ENV_KEYS = ("env_vars", "working_dir", "py_modules")
# What Ray's job supervisor sets for the driver it starts, and ``ray.init()`` reads: the
# job's configuration, whose runtime environment every worker of the job gets.
JOB_CONFIG_VARIABLE = "RAY_JOB_CONFIG_JSON_ENV_VAR"
# prctl(2): the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1
# How long a gated driver may take to exit by itself once its stdin closes.
GATE_EXIT_WAIT_S = 5.0


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
    driver = LocalDriver(plan, entrypoint, runtime_env, name, echo)
    try:
        driver.start()
        return driver.wait()
    except KeyboardInterrupt:
        # Ctrl-C may land before ``wait`` is waiting (the driver already running):
        # it is stopped all the same.
        driver.interrupt()
        raise


class LocalDriver:
    """A job's driver as a process here: started and waited for, or started ahead, gated.

    ``run_local_driver`` starts it and waits. ``rtk train --up`` calls ``start(gated=
    True)`` while the cluster comes up (from the bring-up's thread, once the head has
    its env file), then ``release`` and ``wait`` once it is up, or ``cancel`` when the
    bring-up failed (``toolkit.driver_gate``). ``cancel`` before ``start`` makes the
    start a no-op, so the two may race.

    The process is started, read and waited for by a thread of its own that lives as
    long as it does: Linux sends the parent-death signal (``_end_with_parent``) when
    the *thread* that started a child ends, so a bring-up's short-lived thread must
    not be the one.
    """

    def __init__(
        self,
        plan: ClusterPlan,
        entrypoint: str,
        runtime_env: Mapping[str, Any],
        name: str,
        echo: Callable[[str], None],
    ) -> None:
        """Check that a local driver can run ``entrypoint``; nothing starts yet.

        Raises:
            JobError: The runtime environment needs the Jobs API.
        """
        problem = local_driver_problem(runtime_env)
        if problem:
            raise JobError(f"cannot run {name} as a local driver: {problem}")
        self.name = name
        self._echo = echo
        env_vars = {str(k): str(v) for k, v in dict(runtime_env.get("env_vars") or {}).items()}
        self._env = dict(os.environ) | env_vars
        self._env.pop(JOB_CONFIG_VARIABLE, None)  # a job's around rtk is not this one's
        if env_vars:
            self._env[JOB_CONFIG_VARIABLE] = json.dumps({"runtime_env": {"env_vars": env_vars}})
        # A shipped module (rtk's own source) is imported from where it lies here.
        modules = runtime_env.get("py_modules") or ()
        parents = [os.path.dirname(os.path.abspath(m)) for m in modules]
        if parents:
            self._env["PYTHONPATH"] = os.pathsep.join(
                [*parents, *filter(None, [self._env.get("PYTHONPATH")])]
            )
        self._script = node_session_script(plan, ["bash", "-c", entrypoint])
        self._cwd = str(runtime_env.get("working_dir") or os.getcwd())
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self._owner: threading.Thread | None = None
        self._spawned = threading.Event()
        self._ended = threading.Event()
        self._error: JobError | None = None
        self._cancelled = False
        self._interrupted = False
        self._began = time.monotonic()

    def start(self, gated: bool = False) -> None:
        """Start the driver; ``gated``: held before it runs until ``release``.

        Never raises (it may run in a bring-up's thread): a failure to start is raised
        by ``release`` or ``wait``.
        """
        with self._lock:
            if self._cancelled or self._owner is not None:
                return
            env = dict(self._env)
            if gated:
                env[GATE_VARIABLE] = GATE_STDIN
                self._echo(
                    f"rtk: starting {self.name} here, on the head, as a local process (not a "
                    "Ray job); it imports what it needs and waits until the cluster is up"
                )
            else:
                self._echo(
                    f"rtk: running {self.name} here, on the head, as a local process "
                    "(not a Ray job)"
                )
            self._owner = threading.Thread(
                target=self._own, args=(env, gated), name="rtk-local-driver", daemon=True
            )
            self._owner.start()
        self._spawned.wait()

    def _own(self, env: dict[str, str], gated: bool) -> None:
        """The owner thread: start the process, echo its lines, wait for its end."""
        try:
            # Its own session: a signal for rtk (an sbatch teardown's SIGINT, Ctrl-C at
            # a terminal) reaches the driver once, from here, not twice.
            process = subprocess.Popen(
                ["bash", "-c", self._script],
                cwd=self._cwd,
                env=env,
                stdin=subprocess.PIPE if gated else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,
                preexec_fn=_end_with_parent,
            )
        except OSError as e:
            self._error = JobError(f"cannot start {self.name} here: {e}")
            self._spawned.set()
            self._ended.set()
            return
        self._process = process
        self._began = time.monotonic()
        self._spawned.set()
        try:
            assert process.stdout is not None
            _echo_lines(process.stdout, self._echo)
            process.wait()
        finally:
            self._ended.set()

    def release(self) -> None:
        """Let a gated driver run (a started, ungated one runs already).

        Raises:
            JobError: It could not start, or it ended before it was let through.
        """
        process = self._started()
        if process.stdin is None:
            return
        try:
            process.stdin.write(GO_LINE)
            process.stdin.close()
        except OSError as e:  # BrokenPipeError: it has ended
            code = process.wait()
            raise JobError(
                f"{self.name} ended (status {code}) before the cluster was up: {e}"
            ) from e
        self._began = time.monotonic()

    def cancel(self) -> None:
        """Stop a gated driver, if started, and make a later ``start`` do nothing.

        It exits by itself when its stdin closes; one that has not within
        ``GATE_EXIT_WAIT_S`` is killed.
        """
        process = self._claim(interrupting=False)
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        if not self._ended.wait(GATE_EXIT_WAIT_S):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            self._ended.wait(GATE_EXIT_WAIT_S)

    def wait(self) -> JobOutcome:
        """Wait for the driver to end; how it ended.

        Raises:
            JobError: It could not start.
            KeyboardInterrupt: Interrupted; the driver got SIGINT and was waited for, at
                most ``JOB_STOP_WAIT_S``, then killed.
        """
        try:
            process = self._started()
            self._ended.wait()
        except KeyboardInterrupt:
            self.interrupt()
            raise
        code = process.wait()
        elapsed_s = time.monotonic() - self._began
        if code == 0:
            return JobOutcome(self.name, "SUCCEEDED", elapsed_s)
        return JobOutcome(self.name, "FAILED", elapsed_s, f"the driver exited with status {code}")

    def interrupt(self) -> None:
        """After Ctrl-C: SIGINT to the driver, then SIGKILL after ``JOB_STOP_WAIT_S``.

        A later ``start`` does nothing. Once only; a no-op if it never started.
        """
        process = self._claim(interrupting=True)
        if process is None:
            return
        self._echo(f"rtk: stopping {self.name} (SIGINT, then up to {JOB_STOP_WAIT_S} s)")
        _stop(process)
        self._ended.wait(30.0)

    def _claim(self, interrupting: bool) -> subprocess.Popen[str] | None:
        """Make a later ``start`` do nothing; the process to stop, once spawned.

        None: it never started, could not start, or (``interrupting``) was interrupted
        already.
        """
        with self._lock:
            if interrupting and self._interrupted:
                return None
            self._interrupted = self._interrupted or interrupting
            self._cancelled = True
            started = self._owner is not None
        if not started:
            return None
        self._spawned.wait()
        return self._process

    def _started(self) -> subprocess.Popen[str]:
        """The driver's process.

        Raises:
            JobError: It could not start (or was never started, or was cancelled).
        """
        if self._owner is None:
            raise JobError(f"{self.name} was not started")
        self._spawned.wait()
        if self._error is not None:
            raise self._error
        assert self._process is not None
        return self._process


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
