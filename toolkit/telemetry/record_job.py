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
from collections.abc import Callable
from pathlib import Path

import ray

from toolkit.power.driver import power_driver
from toolkit.power.settings import PowerSettings
from toolkit.rundir import CommandRecord, RunDir
from toolkit.stall.settings import STALL_EXIT, WatchSettings
from toolkit.stall.watchdog import Collector, Watchdog, collect_all
from toolkit.telemetry.options import TelemetryOptions
from toolkit.telemetry.rank_files import gather_rank_files
from toolkit.telemetry.session import TelemetrySession, exit_on_sigterm
from toolkit.telemetry.settle import IdlePhases

# The command's time to end on SIGTERM before SIGKILL: a torchrun driver puts its GPU
# limits back and stops every node's ranks in it. Ray's job stop SIGKILLs this driver
# after RAY_JOB_STOP_WAIT_TIME_S (30 s, jobs.client.JOB_STOP_WAIT_S): it ends before.
ABORT_GRACE_S = 20.0


def main(argv: list[str]) -> int:
    """Run ``argv[1:]`` under telemetry described by the JSON in ``argv[0]``."""
    data = json.loads(argv[0])
    command = argv[1:]
    run_dir = Path(os.path.expanduser(data.pop("run_dir")))
    stall = data.pop("stall", None)
    settings = WatchSettings.from_json(stall) if stall is not None else None
    power_json = data.pop("power", None)
    power = PowerSettings.from_json(power_json) if power_json is not None else PowerSettings()
    options = TelemetryOptions.from_json(data).check()
    run_dir.mkdir(parents=True, exist_ok=True)
    ray.init(logging_level=logging.ERROR)
    exit_on_sigterm()  # after ray.init, which installs a SIGTERM handler of its own
    session = TelemetrySession.for_options(run_dir, options)
    idle = IdlePhases(
        session,
        run_dir,
        options.baseline_s,
        options.cooldown_max_s,
        lambda line: print(f"rtk telemetry: {line}", flush=True),
    )
    session.start()
    began = time.monotonic()
    try:
        idle.before()
        began = time.monotonic()
        driver = power_driver(str(run_dir), power, _say)
        try:
            code = run_watched(
                command, run_dir, settings, before_abort=driver.stop if driver else None
            )
        except OSError as e:  # not found, not executable: the shell's codes
            print(f"rtk telemetry: cannot run {command[0]!r}: {e}", flush=True)
            code = 127 if isinstance(e, FileNotFoundError) else 126
        finally:
            if driver is not None:
                driver.stop()  # the limits go back before the cooldown is measured
        duration_s = time.monotonic() - began
        idle.after()
    finally:
        idle.save()
        # The markers the command's processes wrote on other nodes, then the traces.
        gather_rank_files(run_dir, session.helpers())
        session.stop()

    CommandRecord(tuple(command), code, duration_s).write(RunDir(run_dir).command)
    print(f"rtk telemetry: command exited {code}; traces in {run_dir}/telemetry", flush=True)
    return code


def _say(line: str) -> None:
    print(f"rtk telemetry: {line}", flush=True)


def run_watched(
    command: list[str],
    run_dir: Path,
    settings: WatchSettings | None,
    collector: Collector = collect_all,
    before_abort: Callable[[], None] | None = None,
) -> int:
    """Run ``command``; with ``settings``, watch its ranks for stalls from their first step.

    On a stall with ``--on-stall abort`` (or ``restart-excluding``, which only
    ``rtk train`` can do) the command's process group is stopped and the exit status
    is ``STALL_EXIT``.

    On Ctrl-C or SIGTERM, ``before_abort`` (the power policy's put-back: the job's
    stop leaves seconds) runs before the command is stopped.

    Raises:
        OSError: The command could not be started.
    """
    # RTK_RUN_DIR: where the command may write its markers and results.
    env = {**os.environ, "RTK_RUN_DIR": str(run_dir)}
    # Its own session: a signal to this driver reaches the command through ``abort``
    # only, after ``before_abort`` (subprocess.run would SIGKILL it at once instead).
    child = subprocess.Popen(command, env=env, start_new_session=True)

    def abort(_: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=ABORT_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)

    watchdog = (
        Watchdog(
            str(run_dir), settings, _say, abort=abort, collector=collector, from_first_step=True
        )
        if settings is not None
        else None
    )
    try:
        if watchdog is None:
            return child.wait()
        with watchdog:
            code = child.wait()
    except BaseException:
        if before_abort is not None:
            before_abort()
        abort(None)  # Ctrl-C, SIGTERM: the command does not outlive the job
        raise
    return STALL_EXIT if watchdog.aborted.is_set() else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
