"""Jobs without blocking on the 3-node sandbox: launch --no-wait, jobs, logs [-f], stop,
and every node's Ray logs collected for a bug report (``rtk logs --ray``).

Each rtk command is a subprocess, as a user runs it; Ray's Jobs API on the head does
the work. The first job prints a line every half second until it is stopped; the
second prints a few lines, its variables and the cluster's token, and ends.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, rtk

from toolkit.inventory import load_inventory
from toolkit.sandbox import Sandbox

pytestmark = pytest.mark.ray

TICKS = "import time\nfor i in range(600):\n    print('tick', i, flush=True)\n    time.sleep(0.5)\n"
SHORT = (
    "import os\n"
    "print('greeting', os.environ['RTK_TEST_GREETING'], os.environ['FROM_JSON'])\n"
    "print('token', open(os.environ['RAY_AUTH_TOKEN_PATH']).read().strip())\n"
    "for i in range(5):\n"
    "    print('line', i)\n"
)


@pytest.fixture(scope="module")
def cluster(
    sandbox3: Sandbox, tmp_path_factory: pytest.TempPathFactory, ray_available: None
) -> Iterator[dict[str, Any]]:
    state = tmp_path_factory.mktemp("jobs-state")
    env = {"RTK_STATE_DIR": str(state)}
    inventory = str(sandbox3.inventory_path)
    up = rtk("up", inventory, "--no-preflight", env=env)
    assert up.returncode == 0, up.stderr
    name = load_inventory(inventory).name
    token = (state / name / "auth_token").read_text().strip()
    work = tmp_path_factory.mktemp("jobs-work")  # shipped with each job: keep it small
    try:
        yield {"env": env, "inventory": inventory, "name": name, "token": token, "work": work}
    finally:
        rtk("down", inventory, env=env)


def launch(cluster: dict[str, Any], *args: str) -> str:
    """``rtk launch --no-wait``: the job id, alone on stdout."""
    done = rtk(
        "launch",
        cluster["inventory"],
        "--no-wait",
        "--working-dir",
        str(cluster["work"]),
        *args,
        env=cluster["env"],
    )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(rf"rtk-launch-{cluster['name']}-\d+(-\d+)?\n", done.stdout), done.stdout
    job_id = done.stdout.strip()
    assert f"rtk logs {cluster['inventory']} {job_id} -f" in done.stderr
    return job_id


def jobs(cluster: dict[str, Any]) -> dict[str, dict[str, Any]]:
    done = rtk("jobs", cluster["inventory"], "--json", "--all", env=cluster["env"])
    assert done.returncode == 0, done.stderr
    return {job["job_id"]: job for job in json.loads(done.stdout)["jobs"]}


def wait_for(cluster: dict[str, Any], job_id: str, statuses: tuple[str, ...]) -> str:
    deadline = time.monotonic() + 180
    status = ""
    while time.monotonic() < deadline:
        status = jobs(cluster)[job_id]["status"]
        if status in statuses:
            return status
        time.sleep(1)
    raise AssertionError(f"job {job_id} still {status}, not {statuses}")


def read_lines_until(process: subprocess.Popen[str], wanted: str, timeout_s: float) -> list[str]:
    """Lines of the process's stdout until one contains ``wanted`` (a thread reads)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
        if wanted in line:
            return seen
    raise AssertionError(f"no {wanted!r} in {seen[-20:]}")


def test_a_job_runs_without_rtk_then_is_followed_and_stopped(cluster: dict[str, Any]) -> None:
    job_id = launch(cluster, "--", "python", "-c", TICKS)
    assert wait_for(cluster, job_id, ("RUNNING",)) == "RUNNING"
    table = rtk("jobs", cluster["inventory"], env=cluster["env"])
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].startswith("SUBMISSION ID")
    assert re.search(rf"^{re.escape(job_id)}\s+RUNNING\s", table.stdout, re.MULTILINE)

    # rtk logs -f prints the lines as they come; Ctrl-C stops following, not the job.
    follow = subprocess.Popen(
        [sys.executable, "-m", "toolkit", "logs", cluster["inventory"], job_id, "-f"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, **cluster["env"]},
    )
    try:
        seen = read_lines_until(follow, "tick 4", timeout_s=120)
        follow.send_signal(signal.SIGINT)
        _, err = follow.communicate(timeout=60)
    finally:
        if follow.poll() is None:
            follow.kill()
    # Ray's own lines come first (the runtime env, the entrypoint), then the job's.
    ticks = [line.strip() for line in seen if line.startswith("tick")]
    assert ticks == [f"tick {i}" for i in range(5)]
    assert follow.returncode == 130, err
    assert f"stopped following; job {job_id} goes on" in err
    assert jobs(cluster)[job_id]["status"] == "RUNNING"

    stop = rtk("stop", cluster["inventory"], job_id, env=cluster["env"])
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout == f"{job_id} STOPPED\n"
    assert jobs(cluster)[job_id]["status"] == "STOPPED"

    unknown = rtk("logs", cluster["inventory"], "no-such-job", env=cluster["env"])
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == (
        f"rtk: no job 'no-such-job' on this cluster; rtk jobs {cluster['inventory']} lists its jobs"
    )


def test_launch_without_no_wait_follows_the_job_to_its_outcome(cluster: dict[str, Any]) -> None:
    done = rtk(
        "launch",
        cluster["inventory"],
        "--working-dir",
        str(cluster["work"]),
        "--",
        "python",
        "-c",
        "print('followed to the end'); raise SystemExit(3)",
        env=cluster["env"],
    )
    assert done.returncode == 1, done.stderr
    assert "followed to the end" in done.stdout
    assert re.search(rf"rtk: job rtk-launch-{cluster['name']}-\S+ FAILED after ", done.stderr)


@pytest.fixture(scope="module")
def short_job(cluster: dict[str, Any]) -> str:
    """A job that prints its variables, the cluster's token and five lines, then ends."""
    job_id = launch(
        cluster,
        "--env",
        "RTK_TEST_GREETING=hello",
        "--runtime-env-json",
        '{"env_vars": {"FROM_JSON": "json", "RTK_TEST_GREETING": "overridden"}}',
        "--",
        "python",
        "-c",
        SHORT,
    )
    assert wait_for(cluster, job_id, ("SUCCEEDED", "FAILED")) == "SUCCEEDED"
    return job_id


def test_a_short_job_with_its_env_and_its_whole_log(
    cluster: dict[str, Any], short_job: str
) -> None:
    done = rtk("logs", cluster["inventory"], short_job, env=cluster["env"])
    assert done.returncode == 0, done.stderr
    assert "greeting hello json\n" in done.stdout  # --env wins over the JSON's env_vars
    assert "".join(f"line {i}\n" for i in range(5)) in done.stdout


def test_every_nodes_ray_logs_come_back_without_the_token(
    cluster: dict[str, Any], short_job: str, sandbox3: Sandbox, tmp_path: Path
) -> None:
    out = tmp_path / "bug"
    done = rtk("logs", cluster["inventory"], "--ray", "--out", str(out), env=cluster["env"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("logs of 3 of 3 node(s), ")
    assert done.stdout.rstrip().endswith(f"in {out} (a folder per node)")
    names = sorted(n.name for n in sandbox3.nodes)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == names
    for node in names:
        assert list((out / node / "ray").glob("session_*/raylet.out")), node
        assert (out / node / "rtk" / "node.env").is_file(), node
        assert (out / node / "COLLECTION.txt").is_file(), node
    files = [p for p in out.rglob("*") if p.is_file()]
    assert not [p for p in files if p.name == "auth_token"]
    token = cluster["token"].encode()
    assert [p for p in files if token in p.read_bytes()] == []
    # The short job printed the token: its driver log on the head came back masked.
    head = load_inventory(cluster["inventory"]).head.name
    drivers = list((out / head / "ray").glob(f"session_*/job-driver-{short_job}.log"))
    assert drivers, sorted(p.name for p in (out / head / "ray").glob("session_*/*"))
    assert f"token {'*' * len(token)}" in drivers[0].read_text()
