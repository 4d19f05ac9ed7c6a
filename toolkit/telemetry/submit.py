"""Submit any command as a Ray job that records telemetry around it (``record.py``)."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from toolkit.cluster.jobs import JOB_STOP_WAIT_S, JobOutcome, job_client, run_job
from toolkit.cluster.plan import ClusterPlan
from toolkit.cluster.state import StateStore
from toolkit.train.submit import package_dir


def submit_record(
    plan: ClusterPlan,
    store: StateStore,
    command: list[str],
    options: Mapping[str, Any],
    working_dir: str,
    echo: Callable[[str], None],
    env: Mapping[str, str] | None = None,
) -> JobOutcome:
    """Run ``command`` on the head under telemetry (``options``: record.py's JSON) to its end.

    ``options["run_dir"]`` is the run directory; ``env`` is added to the command's
    environment (``rtk profile`` passes each run's axes that way).
    """
    python = plan.head.node.python
    entrypoint = shlex.join(
        [python, "-m", "toolkit.telemetry.record", json.dumps(dict(options)), *command]
    )
    runtime_env = {
        "py_modules": [package_dir()],
        "working_dir": str(Path(working_dir).resolve()),
        "env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": str(JOB_STOP_WAIT_S), **(env or {})},
    }
    run_name = Path(str(options["run_dir"])).name
    return run_job(
        job_client(plan, store),
        entrypoint,
        runtime_env,
        f"rtk-record-{run_name}-{int(time.time())}",
        echo,
    )
