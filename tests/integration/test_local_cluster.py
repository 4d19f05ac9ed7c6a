"""Real Ray on this machine: rtk up/status/down with the embedded default (no mocks).

A second Ray, started by hand the way users do, runs beside rtk's the whole time:
rtk down must leave it alive.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import LIST_NODES, pids_mentioning, rtk

from toolkit.cluster.plan import build_plan
from toolkit.inventory import default_inventory
from toolkit.jobs.client import job_client, run_job
from toolkit.node.agent import listening_ports, marked_pids
from toolkit.state.store import StateStore

pytestmark = pytest.mark.ray

OTHER_DIR = "/tmp/rtk-test-other"
OTHER_GCS = 6679


@pytest.fixture(scope="module")
def other_ray(ray_available: None) -> Iterator[list[int]]:
    """A plain `ray start --head`, not rtk's; yields its raylet's pid."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    ports = [
        "--node-manager-port=6680",
        "--object-manager-port=6681",
        "--runtime-env-agent-port=6682",
        "--dashboard-agent-grpc-port=6683",
        "--dashboard-agent-listen-port=6684",
        "--metrics-export-port=6685",
        "--min-worker-port=24000",
        "--max-worker-port=24999",
    ]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            f"--port={OTHER_GCS}",
            "--include-dashboard=false",
            "--ray-client-server-port=6678",
            f"--temp-dir={OTHER_DIR}",
            "--disable-usage-stats",
            *ports,
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    raylets = [
        p for p in pids_mentioning(OTHER_DIR) if "raylet" in Path(f"/proc/{p}/comm").read_text()
    ]
    assert raylets, "the other Ray did not start a raylet"
    yield raylets
    for pid in pids_mentioning(OTHER_DIR):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    subprocess.run(["rm", "-rf", OTHER_DIR], check=False)


@pytest.fixture(scope="module")
def module_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("state")


@pytest.fixture(scope="module")
def local_up(other_ray: list[int], module_state: Path) -> Iterator[dict[str, Any]]:
    env = {"RTK_STATE_DIR": str(module_state)}
    began = time.monotonic()
    done = rtk("up", "--local", "--json", env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    result["wall_s"] = time.monotonic() - began
    yield result
    if marked_pids(default_inventory().temp_dir):
        rtk("down", "--local", env=env)


def env_for(state: Path) -> dict[str, str]:
    return {"RTK_STATE_DIR": str(state)}


def test_up_brings_the_node_alive(local_up: dict[str, Any]) -> None:
    assert local_up["started"] == ["localhost"]
    node = local_up["status"]["nodes"][0]
    assert node["alive"] is True
    assert node["resources"]["CPU"] >= 1
    assert node["resources"]["rtk_host:localhost"] == 1


def test_status_json_lists_alive_nodes_and_resources(
    local_up: dict[str, Any], module_state: Path
) -> None:
    done = rtk("status", "--local", "--json", env=env_for(module_state))
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["alive"] == ["localhost"]
    assert status["expected"] == 1
    assert status["ray_version"]
    assert status["nodes"][0]["resources"]["CPU"] >= 1
    text = rtk("status", "--local", env=env_for(module_state))
    assert "1/1 node(s) ready" in text.stdout


def test_every_port_is_pinned(local_up: dict[str, Any]) -> None:
    ports = default_inventory().ports
    listening = listening_ports()
    for port in (
        ports.gcs,
        ports.dashboard,
        ports.node_manager,
        ports.object_manager,
        ports.dashboard_agent_listen,
        ports.client_server,
    ):
        assert port in listening, port


def test_token_files_are_private_and_never_on_a_command_line(
    local_up: dict[str, Any], module_state: Path
) -> None:
    plan = build_plan(default_inventory())
    token_file = Path(plan.paths.token_file)
    local_token = StateStore("local", module_state).token_file
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(plan.paths.env_file).stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(plan.paths.rtk_dir).stat().st_mode) == 0o700
    assert stat.S_IMODE(local_token.stat().st_mode) == 0o600
    token = token_file.read_text()
    assert token == local_token.read_text() and len(token) == 64
    for pid in marked_pids(plan.paths.temp_dir):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert token.encode() not in cmdline


def test_a_client_without_the_token_is_refused(local_up: dict[str, Any], tmp_path: Path) -> None:
    plan = build_plan(default_inventory())
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    base["HOME"] = str(tmp_path)  # no ~/.ray/auth_token to fall back on
    refused = subprocess.run(
        [sys.executable, "-c", LIST_NODES, plan.dashboard_url],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1
    assert "Unauthorized" in refused.stdout or "Authentication" in refused.stdout
    allowed = subprocess.run(
        [sys.executable, "-c", LIST_NODES, plan.dashboard_url],
        env={**base, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": plan.paths.token_file},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert allowed.stdout.strip() == "1"


def test_up_twice_starts_nothing_new(local_up: dict[str, Any], module_state: Path) -> None:
    plan = build_plan(default_inventory())
    before = sorted(marked_pids(plan.paths.temp_dir))
    done = rtk("up", "--local", "--json", env=env_for(module_state))
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    assert again["started"] == []
    assert again["nodes"][0]["action"] == "already running"
    raylets = [p for p, n in marked_pids(plan.paths.temp_dir).items() if n == "raylet"]
    assert len(raylets) == 1 and raylets[0] in before


class CountingClient:
    """The real Jobs API client, counting the log characters rtk takes from it."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.fetched_chars = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def get_job_logs(self, job_id: str) -> str:
        logs = str(self.client.get_job_logs(job_id))
        self.fetched_chars += len(logs)
        return logs

    async def tail_job_logs(self, job_id: str) -> AsyncIterator[str]:
        async for chunk in self.client.tail_job_logs(job_id):
            self.fetched_chars += len(chunk)
            yield chunk


def test_a_long_job_log_is_streamed_with_bounded_work(
    local_up: dict[str, Any], module_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 50 MB over about 5 s: the old loop fetched the whole log every second.
    lines, line_chars = 500_000, 100
    printer = (
        "import sys, time\n"
        f"for i in range({lines}):\n"
        f"    sys.stdout.write(f'{{i:09d}}' + 'x' * {line_chars - 10} + '\\n')\n"
        f"    if i % {lines // 5} == 0: sys.stdout.flush(); time.sleep(1)\n"
    )
    monkeypatch.setenv("RTK_STATE_DIR", str(module_state))
    inv = default_inventory()
    plan = build_plan(inv)
    client = CountingClient(job_client(plan, StateStore(inv.name)))
    seen = {"lines": 0, "other_chars": 0, "out_of_order": 0}

    def echo(text: str) -> None:
        for line in text.split("\n"):
            if len(line) == line_chars - 1 and line[:9].isdigit():
                seen["out_of_order"] += int(line[:9]) != seen["lines"]
                seen["lines"] += 1
            else:  # Ray's own lines before the entrypoint's output
                seen["other_chars"] += len(line) + 1

    entrypoint = f"{plan.head.node.python} -c {shlex.quote(printer)}"
    outcome = run_job(client, entrypoint, {}, f"rtk-test-log-{int(time.time())}", echo)
    assert outcome.ok, outcome.message
    assert seen["lines"] == lines and seen["out_of_order"] == 0, seen
    assert seen["other_chars"] < 2000, seen
    log_chars = lines * line_chars + seen["other_chars"]
    assert client.fetched_chars <= 2 * log_chars, client.fetched_chars


def test_down_stops_only_rtk_ray_and_removes_its_files(
    local_up: dict[str, Any], other_ray: list[int], module_state: Path
) -> None:
    plan = build_plan(default_inventory())
    assert marked_pids(plan.paths.temp_dir)
    done = rtk("down", "--local", "--json", env=env_for(module_state))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["stopped"]["localhost"]["stopped"] >= 3
    assert marked_pids(plan.paths.temp_dir) == {}
    assert not Path(plan.paths.temp_dir).exists()
    assert not (module_state / "local").exists()
    # The Ray someone else started is still there and still answers.
    for pid in other_ray:
        assert Path(f"/proc/{pid}").exists()
    check = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import ray; ray.init(address='127.0.0.1:{OTHER_GCS}'); print(len(ray.nodes()))",
        ],
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert check.returncode == 0, check.stderr[-2000:]
    assert check.stdout.strip().endswith("1")
    # Status of a stopped cluster says so and exits 1.
    status = rtk("status", "--local", env=env_for(module_state))
    assert status.returncode == 1
    assert "not running" in status.stdout


def test_a_node_missing_its_gpus_is_named_and_stopped_again(
    ray_available: None, tmp_path: Path, state_dir: Path
) -> None:
    inventory = tmp_path / "gpu.yaml"
    inventory.write_text(
        "cluster: gpuless\ntransport: local\n"
        "nodes:\n  - host: box\n    address: 127.0.0.1\n    gpus: 1\n"
        "    resources: {nvlink: 1}\n"
        "ports: {gcs: 6779, dashboard: 8665, client_server: 6778, node_manager: 6780,\n"
        "  object_manager: 6781, runtime_env_agent: 6782, dashboard_agent_grpc: 6783,\n"
        "  dashboard_agent_listen: 6784, metrics_export: 6785, min_worker: 25000,\n"
        "  max_worker: 25999}\n"
        "ray: {wait_timeout_s: 4}\n"
    )
    done = rtk("up", str(inventory))
    assert done.returncode == 5, done.stderr
    assert "box: joined with 0 GPU, expected 1" in done.stderr
    assert "stopping what this run started on 1 node(s)" in done.stderr
    assert marked_pids("/tmp/rtk-gpuless") == {}
