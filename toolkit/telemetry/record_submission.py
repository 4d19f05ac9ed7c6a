"""The Ray job that records telemetry around any command (``record_job.py``), as data."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping

from toolkit.cluster.plan import ClusterPlan
from toolkit.jobs.client import JOB_STOP_WAIT_S
from toolkit.jobs.runtime_env import working_dir_env
from toolkit.jobs.shipped_code import code_env
from toolkit.json_types import JsonObject
from toolkit.power.settings import PowerSettings
from toolkit.stall.flight.collectives import FLIGHT_RECORDER_ENV
from toolkit.stall.settings import WatchSettings
from toolkit.state.store import state_root
from toolkit.telemetry.options import TelemetryOptions


def record_job(
    plan: ClusterPlan,
    command: list[str],
    run_dir: str,
    options: TelemetryOptions,
    working_dir: str,
    env: Mapping[str, str] | None = None,
    ship_code: bool = True,
    stall: WatchSettings | None = None,
    power: PowerSettings | None = None,
) -> tuple[str, JsonObject]:
    """The entrypoint and runtime environment that run ``command`` on the head under telemetry.

    The runtime environment is Ray's ``runtime_env``, a JSON document handed to Ray.

    ``run_dir`` is the run directory; ``env`` is added to the command's environment
    (``rtk profile`` passes each run's axes that way). ``ship_code`` as in
    ``shipped_code``. With ``stall``, the job watches the command's ranks for stalls
    from their first step (``toolkit.stall.watchdog``); with ``power`` (a policy that
    acts), its power policy sets the GPUs' limits (``toolkit.power.driver``).
    """
    python = plan.head.node.python
    arguments: dict[str, object] = {"run_dir": run_dir, **options.to_json()}
    if stall is not None:
        arguments["stall"] = stall.to_json()
    if power is not None and power.acts:
        arguments["power"] = power.to_json()
    entrypoint = shlex.join(
        [python, "-m", "toolkit.telemetry.record_job", json.dumps(arguments), *command]
    )
    # RTK_RUN_DIR reaches every process of the job on every node (a Ray Train
    # script's workers too): toolkit.markers writes there when it is set.
    env_vars: JsonObject = {
        "RAY_JOB_STOP_WAIT_TIME_S": str(JOB_STOP_WAIT_S),
        "RTK_RUN_DIR": run_dir,
        # PyTorch's Flight Recorder in every rank: a stall is named at the collective.
        **FLIGHT_RECORDER_ENV,
        **(env or {}),
    }
    runtime_env: JsonObject = (
        code_env(ship_code)
        | working_dir_env(working_dir, run_dir, str(state_root()))
        | {"env_vars": env_vars}
    )
    return entrypoint, runtime_env
