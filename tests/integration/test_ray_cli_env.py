"""Ray's own CLI against an rtk cluster, as Ray's docs use it: after ``rtk env --export``
from this machine, and in ``rtk shell`` on a node; refused without the token.

Every ``ray`` command runs in a fresh bash whose environment has no ``RAY_*`` variable,
a HOME with no ``~/.ray/auth_token``, and the ``ray`` of the Python running the tests
first on PATH.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import rtk

from toolkit.cluster.plan import build_plan
from toolkit.inventory import load_inventory
from toolkit.sandbox import Sandbox

pytestmark = pytest.mark.ray

RTK = shlex.join([sys.executable, "-m", "toolkit"])
DRIVER = "import ray; ray.init(); print('resources', ray.cluster_resources())"
# How Ray words the refusals: the GCS's to ray status, the dashboard's 401 to ray job.
GCS_REFUSAL = "AuthenticationError: RPC error: InvalidAuthToken"
JOBS_REFUSAL = (
    "AuthenticationError: Authentication required: Unauthorized: Missing authentication token"
)


@pytest.fixture(scope="module")
def client_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A user's environment on this machine: no RAY_* variable, an empty HOME, rtk's state."""
    root = tmp_path_factory.mktemp("ray-cli-env")
    (root / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.pop("RTK_INVENTORY", None)
    env.update(
        RTK_STATE_DIR=str(root / "state"),
        HOME=str(root / "home"),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    )
    return env


@pytest.fixture(scope="module")
def cluster(
    sandbox3: Sandbox, client_env: dict[str, str], ray_available: None
) -> Iterator[dict[str, Any]]:
    inventory = str(sandbox3.inventory_path)
    done = rtk("up", inventory, "--no-preflight", env=client_env)
    assert done.returncode == 0, done.stderr
    plan = build_plan(load_inventory(inventory))
    yield {"inventory": inventory, "gcs": plan.head_address, "dashboard": plan.dashboard_url}
    rtk("down", inventory, env=client_env)


def bash(
    script: str, env: dict[str, str], timeout_s: float = 240
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh, non-interactive bash with ``env``."""
    return subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


def with_export(inventory: str, commands: str) -> str:
    """``commands`` after ``eval "$(rtk env INVENTORY --export)"``, stopping at a failure."""
    export = f"{RTK} env {shlex.quote(inventory)} --export --shell bash"
    return f'set -e\neval "$({export})"\n{commands}'


def test_after_the_export_ray_status_and_ray_jobs_work(
    cluster: dict[str, Any], client_env: dict[str, str]
) -> None:
    job = f"rtk-env-{uuid.uuid4().hex[:8]}"
    status = bash(with_export(cluster["inventory"], "ray status"), client_env)
    assert status.returncode == 0, status.stdout + status.stderr
    # The autoscaler's summary, which lags the joins by seconds: the head is in it.
    assert "Autoscaler status" in status.stdout and "rtk_host:node1" in status.stdout

    submit = bash(
        with_export(
            cluster["inventory"],
            f"ray job submit --submission-id {job} -- python -c {shlex.quote(DRIVER)}\n"
            f"ray job list | grep -c {job}\n"
            f"ray job logs {job}",
        ),
        client_env,
    )
    out = submit.stdout + submit.stderr
    assert submit.returncode == 0, out
    assert f"Job '{job}' succeeded" in out
    # The driver's ray.init() on the head found the cluster and its three nodes.
    # Printed twice: as ray job submit followed the job, and by ray job logs.
    assert submit.stdout.count("resources {") == 2, out
    assert "'rtk_host:node3': 1.0" in submit.stdout

    sleeper = f"{job}-sleeps"
    stop = bash(
        with_export(
            cluster["inventory"],
            f"ray job submit --no-wait --submission-id {sleeper} -- sleep 600\n"
            f"ray job stop {sleeper}\n"
            f"ray job status {sleeper}",
        ),
        client_env,
    )
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert f"Job '{sleeper}' was stopped" in stop.stdout + stop.stderr


def test_without_the_export_the_same_commands_are_refused(
    cluster: dict[str, Any], client_env: dict[str, str]
) -> None:
    # The addresses are given, so only the token (and RAY_AUTH_MODE) is missing.
    status = bash(f"ray status --address {cluster['gcs']}", client_env)
    assert status.returncode != 0
    assert GCS_REFUSAL in status.stderr, status.stderr[-3000:]

    job = f"rtk-env-{uuid.uuid4().hex[:8]}"
    address = shlex.quote(cluster["dashboard"])
    for command in (
        f"ray job submit --address {address} --submission-id {job} -- "
        f"python -c {shlex.quote(DRIVER)}",
        f"ray job logs --address {address} {job}",
    ):
        refused = bash(command, client_env)
        out = refused.stdout + refused.stderr
        assert refused.returncode != 0, out
        assert JOBS_REFUSAL in out, out[-3000:]


def test_rtk_shell_runs_ray_on_the_nodes_with_the_cluster_environment(
    cluster: dict[str, Any], client_env: dict[str, str]
) -> None:
    status = rtk("shell", cluster["inventory"], "--", "ray", "status", env=client_env)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "Autoscaler status" in status.stdout and "rtk_host:node1" in status.stdout

    count = "import ray; ray.init(); print('alive', sum(n['Alive'] for n in ray.nodes()))"
    on_worker = rtk(
        "shell", cluster["inventory"], "node2", "--", "python", "-c", count, env=client_env
    )
    assert on_worker.returncode == 0, on_worker.stdout + on_worker.stderr
    assert "alive 3" in on_worker.stdout

    failing = rtk("shell", cluster["inventory"], "--", "bash", "-c", "exit 3", env=client_env)
    assert failing.returncode == 3

    # Without COMMAND: the login user's shell, here reading its commands from a pipe.
    session = rtk(
        "shell",
        cluster["inventory"],
        env=client_env,
        input='echo "address=$RAY_ADDRESS node=$RTK_NODE"\nexit 4\n',
    )
    assert session.returncode == 4, session.stderr
    assert f"address={cluster['gcs']} node=node1" in session.stdout
