"""The Ray job that ``rtk train`` submits: ``python -m toolkit.train.job CONFIG_JSON``.

It runs on the head, sizes the worker group from the cluster (``toolkit.train.workers``:
one worker per GPU, or per node on CPU clusters, unless --num-workers says otherwise)
and runs Ray Train's TorchTrainer (``toolkit.train.fitting``) with checkpoints kept in
the run directory. Beside it, the job-driver runtime (``toolkit.jobdriver.runtime``)
runs the telemetry, the stall watchdog and the power policy, and the teardown.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import sys
from pathlib import Path

import ray

from toolkit.driver_gate import gate_passed
from toolkit.jobdriver.runtime import DriverOptions, JobDriver
from toolkit.rundir import RunDir, TrainConfigRecord
from toolkit.stall.settings import STALL_EXIT
from toolkit.telemetry.around import RunTelemetry
from toolkit.telemetry.cluster_session import TelemetrySession
from toolkit.telemetry.settle import IdlePhases
from toolkit.train.config import TrainConfig
from toolkit.train.fitting import TrainRun
from toolkit.train.workers import placement_problem, worker_layout


def say(line: str) -> None:
    """A line of rtk's own in the job's log."""
    print(f"rtk train: {line}", flush=True)


def main(argv: list[str]) -> int:
    """Run the training job described by the JSON in ``argv[0]``."""
    config = TrainConfig.from_json(json.loads(argv[0])).check()
    # "~" in --output-dir means the home of the user the job runs as, on the nodes.
    config = dataclasses.replace(config, run_dir=os.path.expanduser(config.run_dir))
    Path(config.run_dir).mkdir(parents=True, exist_ok=True)
    ray.init(logging_level=logging.ERROR)
    alive = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
    totals: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    layout = worker_layout(config, totals, len(alive))
    problem = placement_problem(layout, totals)
    if problem is not None:
        say(f"cannot start: {problem}")
        return 1
    say(
        f"{layout.num_workers} worker(s) x {layout.resources_per_worker}, "
        f"strategy {config.strategy}, run dir {config.run_dir}"
    )
    TrainConfigRecord(config.to_json(), layout.to_json()).write(RunDir(config.run_dir).train_config)
    run = TrainRun(config, layout, say)
    session = (
        TelemetrySession(
            config.run_dir,
            config.telemetry_sensors,
            config.telemetry_rate_hz,
            config.power_rate_hz or None,
            prometheus_port=config.prometheus_port,
            energy_rate_hz=config.energy_rate_hz or None,
        )
        if config.telemetry
        else None
    )
    idle = (
        IdlePhases(session, config.run_dir, config.baseline_s, config.cooldown_max_s, say)
        if session is not None
        else None
    )
    # SIGINT is the run's own: Ray Train's, or the stop request of a run that stops
    # with a checkpoint (toolkit.train.stop).
    options = DriverOptions(
        config.run_dir, say, config.stall, config.power, signals=(signal.SIGTERM,)
    )
    return JobDriver(options, run, RunTelemetry(config.run_dir, session, idle)).run()


if __name__ == "__main__":
    # Started ahead of the cluster (rtk train --up): imports done, wait for the word.
    if not gate_passed(os.environ, sys.stdin):
        sys.exit(0)
    code = main(sys.argv[1:])
    if code == STALL_EXIT:
        # The stalled ranks cannot stop themselves, nor can Ray Train's fit, still
        # waiting in its thread: the job ends with this process, and Ray ends its workers.
        say(f"stopped after a stall (exit {STALL_EXIT})")
        sys.stdout.flush()
        os._exit(STALL_EXIT)
    sys.exit(code)
