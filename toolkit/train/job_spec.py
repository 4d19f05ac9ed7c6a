"""The built-in trainer's Ray job, as data, and the record of runs that ``--resume`` reads."""

from __future__ import annotations

import json
import shlex
import time

from toolkit.cluster.plan import ClusterPlan
from toolkit.jobs.client import JOB_STOP_WAIT_S
from toolkit.jobs.shipped_code import code_env
from toolkit.json_types import JsonObject
from toolkit.stall.flight.collectives import FLIGHT_RECORDER_ENV
from toolkit.stall.settings import RESTART_EXCLUDING
from toolkit.state.cluster_state import ClusterState, RecordedRun
from toolkit.state.store import StateStore
from toolkit.train.config import TrainConfig


def train_job(
    plan: ClusterPlan, config: TrainConfig, ship_code: bool = True
) -> tuple[str, JsonObject]:
    """The entrypoint and runtime environment of the training job (``shipped_code``)."""
    # The head's own Python (the one Ray runs), not whatever "python" is on its PATH.
    python = plan.head.node.python
    entrypoint = shlex.join([python, "-m", "toolkit.train.job", json.dumps(config.to_json())])
    runtime_env = code_env(ship_code) | {
        "env_vars": {
            # Read by Ray Train's controller, which runs inside this job.
            "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": f"{start_wait_s(config):g}",
            # Ray Train 2.60 patches print() to log and also tees to the wrapped
            # stdout, so every progress line reached the terminal twice.
            "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
            # Ray Train's preemption watcher acts on the nodes Ray's autoscaler drains
            # (cloud spot instances); rtk's nodes are fixed, and SLURM preempts with a
            # signal. Off, its actor is one process less per run, and the error line
            # Ray logs while creating it ("PreemptionWatcher ... max_restarts > 0") goes.
            "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
            # Read by the job's supervisor: time between SIGTERM and SIGKILL when the
            # job is stopped, for the telemetry to be collected (Ray's default: 3 s).
            "RAY_JOB_STOP_WAIT_TIME_S": str(JOB_STOP_WAIT_S),
            # Stop with SIGINT: Ray Train's own handler then aborts the workers before
            # the telemetry is collected (with SIGTERM they trained on meanwhile).
            "RAY_JOB_STOP_SIGNAL": "SIGINT",
            # PyTorch's Flight Recorder in every rank: a stall is named at the collective.
            **FLIGHT_RECORDER_ENV,
        },
    }
    return entrypoint, runtime_env


# With --on-stall restart-excluding the run goes on without the excluded nodes rather
# than wait for them: a restart that still asks for them (Ray's view of the cluster lags
# a node's death by seconds) gives up after this long, and the next one is sized anew.
EXCLUDING_START_WAIT_S = 60.0


def start_wait_s(config: TrainConfig) -> float:
    """How long a worker group's start may wait for its resources."""
    if config.stall.policy == RESTART_EXCLUDING and config.min_nodes:
        return min(config.restart_wait_s, EXCLUDING_START_WAIT_S)
    return config.restart_wait_s


def remember_run(store: StateStore, run_id: str, run_dir: str) -> None:
    """Record the run in the cluster's state, last, so ``--resume`` finds it."""
    state = store.load() or ClusterState()
    store.save(state.with_run(RecordedRun(run_id, run_dir, time.time())))
