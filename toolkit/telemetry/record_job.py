"""The Ray job behind ``rtk telemetry record``: sample every node while a command runs.

``python -m toolkit.telemetry.record_job OPTIONS_JSON COMMAND...`` (OPTIONS_JSON: the run
directory and the ``TelemetryOptions``) starts a sampler on every node, runs COMMAND on
the head (inside the job's working directory), then collects the traces into the run
directory and exits with the command's exit status. COMMAND finds the run directory in
``$RTK_RUN_DIR``. With stall settings in OPTIONS_JSON (``rtk telemetry record``'s
``--on-stall``), the stall watchdog follows the markers the command's ranks write,
from their first step.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import ray

from toolkit.jobdriver.runtime import DriverOptions, JobDriver
from toolkit.power.settings import PowerSettings
from toolkit.rundir import CommandRecord, RunDir
from toolkit.stall.settings import WatchSettings
from toolkit.telemetry.around import RunTelemetry
from toolkit.telemetry.cluster_session import TelemetrySession
from toolkit.telemetry.options import TelemetryOptions
from toolkit.telemetry.settle import IdlePhases

# The command's time to end on SIGTERM before SIGKILL: a torchrun driver puts its GPU
# limits back and stops every node's ranks in it. Ray's job stop SIGKILLs this driver
# after RAY_JOB_STOP_WAIT_TIME_S (30 s, jobs.client.JOB_STOP_WAIT_S): it ends before.
ABORT_GRACE_S = 20.0


def main(argv: list[str]) -> int:
    """Run ``argv[1:]`` under telemetry described by the JSON in ``argv[0]``."""
    data = json.loads(argv[0])
    run_dir = Path(os.path.expanduser(data.pop("run_dir")))
    stall = data.pop("stall", None)
    power = data.pop("power", None)
    options = TelemetryOptions.from_json(data).check()
    run_dir.mkdir(parents=True, exist_ok=True)
    ray.init(logging_level=logging.ERROR)
    session = TelemetrySession.for_options(run_dir, options)
    idle = IdlePhases(session, run_dir, options.baseline_s, options.cooldown_max_s, say)
    command = CommandRun(argv[1:], run_dir)
    code = JobDriver(
        DriverOptions(
            str(run_dir),
            say,
            stall=WatchSettings.from_json(stall) if stall is not None else None,
            power=PowerSettings.from_json(power) if power is not None else PowerSettings(),
            watch_from_first_step=True,
        ),
        command,
        RunTelemetry(run_dir, session, idle, cooldown_after_failure=True),
    ).run()
    CommandRecord(tuple(command.argv), code, command.duration_s).write(RunDir(run_dir).command)
    say(f"command exited {code}; traces in {run_dir}/telemetry")
    return code


def say(line: str) -> None:
    """A line of rtk's own in the job's log."""
    print(f"rtk telemetry: {line}", flush=True)


class CommandRun:
    """The command, run on the head with ``RTK_RUN_DIR`` set (the driver's workload).

    It runs in a session of its own: a signal to the driver reaches it only through
    ``stop``, after the GPU limits went back, as SIGTERM (subprocess.run would SIGKILL it
    at once), and SIGKILL only if it has not ended after ``ABORT_GRACE_S``.
    """

    def __init__(self, argv: list[str], run_dir: Path) -> None:
        self.argv, self.run_dir = argv, run_dir
        self.duration_s = 0.0
        self._child: subprocess.Popen[bytes] | None = None

    def run(self) -> int:
        """The command's exit status (the shell's 127 or 126 when it cannot start)."""
        began = time.monotonic()
        try:
            env = {**os.environ, "RTK_RUN_DIR": str(self.run_dir)}
            self._child = subprocess.Popen(self.argv, env=env, start_new_session=True)
            return self._child.wait()
        except OSError as e:  # not found, not executable
            say(f"cannot run {self.argv[0]!r}: {e}")
            return 127 if isinstance(e, FileNotFoundError) else 126
        finally:
            self.duration_s = time.monotonic() - began

    def stop(self) -> None:
        """SIGTERM to the command's process group; SIGKILL after the grace."""
        child = self._child
        if child is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=ABORT_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
