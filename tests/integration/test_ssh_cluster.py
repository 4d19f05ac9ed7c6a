"""A real 3-node cluster over SSH on the namespace sandbox: bring-up, work, teardown.

Each sandbox node has its own network, PID, mount and UTS namespace and its own
sshd; rtk reaches them exactly as it reaches real machines.
"""

from __future__ import annotations

import json
import stat
import uuid
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import LIST_NODES, require, rtk
from gloo_allreduce import GLOO_ALLREDUCE

from toolkit.cluster.plan import build_plan
from toolkit.cluster.smoke import run_smoke
from toolkit.inventory import load_inventory
from toolkit.sandbox import Sandbox
from toolkit.shell import with_env_file
from toolkit.transport import SshTransport

pytestmark = pytest.mark.ray


def node_names(sandbox: Sandbox) -> list[str]:
    return [n.name for n in sandbox.nodes]


@pytest.fixture(scope="module")
def ssh_state(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {"RTK_STATE_DIR": str(tmp_path_factory.mktemp("ssh-state"))}


@pytest.fixture(scope="module")
def cluster(
    sandbox3: Sandbox, ssh_state: dict[str, str], ray_available: None
) -> Iterator[dict[str, Any]]:
    inventory = str(sandbox3.inventory_path)
    done = rtk("up", inventory, "--json", env=ssh_state)
    assert done.returncode == 0, done.stderr
    yield json.loads(done.stdout)
    rtk("down", inventory, env=ssh_state)


def test_up_gives_three_alive_nodes(cluster: dict[str, Any], sandbox3: Sandbox) -> None:
    assert sorted(cluster["started"]) == node_names(sandbox3)
    status = cluster["status"]
    assert status["alive"] == node_names(sandbox3)
    by_name = {n["name"]: n for n in status["nodes"]}
    for node in sandbox3.nodes:
        # --node-ip-address came from each node's route to the head.
        assert by_name[node.name]["node_ip"] == node.address
        assert by_name[node.name]["resources"][f"rtk_host:{node.name}"] == 1
    # rtk up ran the fast preflight subset after the bring-up, and it passed.
    preflight = cluster["preflight"]
    assert preflight["status"] in ("pass", "warn")
    gcs = [c for c in preflight["checks"] if c["name"] == "net.port.gcs"]
    assert [(c["scope"], c["measured"]) for c in gcs] == [("node1", "reached from 2 of 2 peers")]


def test_a_ray_task_lands_on_every_node(cluster: dict[str, Any], sandbox3: Sandbox) -> None:
    plan = build_plan(load_inventory(sandbox3.inventory_path))
    with SshTransport() as transport:
        ran = run_smoke(plan, transport)
    assert {name: where["hostname"] for name, where in ran.items()} == {
        n: n for n in node_names(sandbox3)
    }


def test_gloo_allreduce_across_the_nodes_started_through_ray(
    cluster: dict[str, Any], sandbox3: Sandbox
) -> None:
    require(find_spec("torch") is not None, "torch is not installed (pip install '.[train]')")
    plan = build_plan(load_inventory(sandbox3.inventory_path))
    head = plan.head.node
    command = with_env_file(
        plan.paths.env_file, f"HOSTS={','.join(node_names(sandbox3))} {head.python} -"
    )
    with SshTransport() as transport:
        result = transport.run(head, command, stdin=GLOO_ALLREDUCE, timeout_s=300)
    assert result.ok, result.tail(40)
    ranks = json.loads(result.stdout.strip().splitlines()[-1])
    assert [r["sum"] for r in ranks] == [6.0, 6.0, 6.0]
    assert sorted(r["host"] for r in ranks) == node_names(sandbox3)
    assert all(r["ifname"] and r["ifname"] != "lo" for r in ranks)


def test_token_is_a_private_file_on_every_node(cluster: dict[str, Any], sandbox3: Sandbox) -> None:
    plan = build_plan(load_inventory(sandbox3.inventory_path))
    done = rtk(
        "exec",
        str(sandbox3.inventory_path),
        "--json",
        "--",
        "stat",
        "-c",
        "%a %s",
        plan.paths.token_file,
        plan.paths.env_file,
        plan.paths.rtk_dir,
    )
    assert done.returncode == 0, done.stderr
    for run in json.loads(done.stdout)["nodes"]:
        assert run["stdout"].split() == [
            "600",
            "64",
            "600",
            run["stdout"].split()[3],
            "700",
            run["stdout"].split()[5],
        ]


def test_a_client_without_the_token_is_refused(cluster: dict[str, Any], sandbox3: Sandbox) -> None:
    plan = build_plan(load_inventory(sandbox3.inventory_path))
    worker = plan.workers[0].node
    bare = f"env -u RAY_AUTH_TOKEN_PATH HOME=/tmp {worker.python} - {plan.dashboard_url}"
    with SshTransport() as transport:
        refused = transport.run(worker, bare, stdin=LIST_NODES, timeout_s=120)
        allowed = transport.run(
            worker,
            with_env_file(plan.paths.env_file, f"{worker.python} - {plan.dashboard_url}"),
            stdin=LIST_NODES,
            timeout_s=120,
        )
    assert refused.exit_code == 1
    assert "Unauthorized" in refused.stdout or "Authentication" in refused.stdout
    assert allowed.ok, allowed.tail()
    assert allowed.stdout.strip() == "3"


def test_up_again_starts_nothing_new(
    cluster: dict[str, Any], sandbox3: Sandbox, ssh_state: dict[str, str]
) -> None:
    done = rtk("up", str(sandbox3.inventory_path), "--json", env=ssh_state)
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    assert again["started"] == []
    assert {n["action"] for n in again["nodes"]} == {"already running"}


def test_exec_prefixes_output_and_reports_each_exit_status(
    cluster: dict[str, Any], sandbox3: Sandbox
) -> None:
    inventory = str(sandbox3.inventory_path)
    done = rtk("exec", inventory, "--", "hostname")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"[{n}] {n}" for n in node_names(sandbox3)]
    failing = rtk("exec", inventory, "--json", "--", "bash", "-c", 'test "$RTK_NODE" != node2')
    assert failing.returncode == 1
    result = json.loads(failing.stdout)
    assert result["failed"] == ["node2"]
    assert [n["exit_code"] for n in result["nodes"]] == [0, 1, 0]


def test_status_names_versions_and_dashboard(
    cluster: dict[str, Any], sandbox3: Sandbox, ssh_state: dict[str, str]
) -> None:
    done = rtk("status", str(sandbox3.inventory_path), env=ssh_state)
    assert done.returncode == 0, done.stderr
    assert "3/3 node(s) ready, Ray 2." in done.stdout
    assert f"dashboard http://{sandbox3.nodes[0].address}:8265" in done.stdout


def _ray_processes(sandbox: Sandbox) -> dict[str, str]:
    found = {}
    for node in sandbox.nodes:
        # Renamed Ray processes (ray::DashboardAgent, ray-dashboard-*) count too.
        pattern = "raylet|gcs_server|^ray::|^ray-dashboard-"
        done = sandbox.run_in(node.name, ["pgrep", "-a", "-f", pattern], 30)
        found[node.name] = done.stdout.strip()
    return found


def test_down_leaves_no_ray_process_on_any_node_even_with_the_head_gone(
    cluster: dict[str, Any], sandbox3: Sandbox, ssh_state: dict[str, str]
) -> None:
    # The head's Ray is gone first (killed, as by the OOM killer): down still stops
    # every worker's and removes every node's files. A healthy cluster's down is every
    # other scenario's teardown (the TLS one checks its files, the profile one its Ray).
    sandbox3.run_in("node1", ["pkill", "-9", "-f", "ray"], 30)
    done = rtk("down", str(sandbox3.inventory_path), "--json", env=ssh_state)
    assert done.returncode == 0, done.stderr
    assert _ray_processes(sandbox3) == {n: "" for n in node_names(sandbox3)}
    plan = build_plan(load_inventory(sandbox3.inventory_path))
    for node in sandbox3.nodes:
        gone = sandbox3.run_in(node.name, ["test", "-e", plan.paths.temp_dir], 30)
        assert gone.returncode == 1


def _variant(sandbox: Sandbox, path: Path, **changes: Any) -> Path:
    data = yaml.safe_load(sandbox.inventory_path.read_text())
    data.update(changes)
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_node_without_sshd_is_named_and_min_nodes_decides(
    sandbox3: Sandbox, tmp_path: Path, state_dir: Path, ray_available: None
) -> None:
    assert _ray_processes(sandbox3) == {n: "" for n in node_names(sandbox3)}
    strict = _variant(sandbox3, tmp_path / "strict.yaml")
    lenient = _variant(sandbox3, tmp_path / "lenient.yaml", min_nodes=2)

    sandbox3.stop_sshd("node3")
    try:
        failed = rtk("up", str(strict))
        assert failed.returncode == 4, failed.stderr
        assert "node3: cannot connect to root@" in failed.stderr
        # What this run started is stopped again.
        assert _ray_processes(sandbox3) == {n: "" for n in node_names(sandbox3)}

        partial = rtk("up", str(lenient), "--json")
        assert partial.returncode == 0, partial.stderr
        result = json.loads(partial.stdout)
        assert result["status"]["alive"] == ["node1", "node2"]
        assert [n for n in result["nodes"] if n["action"] == "failed"][0]["name"] == "node3"
        assert "node3" in partial.stderr and "failed" in partial.stderr
        down = rtk("down", str(lenient))
        assert down.returncode == 4
        assert "node3" in down.stderr
    finally:
        sandbox3.start_sshd("node3")
    assert rtk("down", str(lenient)).returncode == 0
    assert _ray_processes(sandbox3) == {n: "" for n in node_names(sandbox3)}


def test_unknown_host_keys_are_refused_unless_accepted(
    sandbox3: Sandbox, tmp_path: Path, state_dir: Path
) -> None:
    empty = tmp_path / "known_hosts"
    data = yaml.safe_load(sandbox3.inventory_path.read_text())
    data["defaults"]["ssh"]["known_hosts"] = str(empty)
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    refused = rtk("exec", str(path), "--", "true")
    assert refused.returncode == 1
    assert f"is not in {empty}" in refused.stderr
    data["defaults"]["ssh"]["accept_new_host_keys"] = True
    path.write_text(yaml.safe_dump(data))
    accepted = rtk("exec", str(path), "--", "true")
    assert accepted.returncode == 0, accepted.stderr
    assert len(empty.read_text().splitlines()) == 3
    assert stat.S_IMODE(empty.stat().st_mode) == 0o600


def test_hostile_values_run_nothing_over_ssh(
    sandbox3: Sandbox, tmp_path: Path, state_dir: Path
) -> None:
    # /var/tmp is the host's own on every node (each node's /tmp is private).
    tag = uuid.uuid4().hex[:6]
    sentinels = [Path(f"/var/tmp/pw{tag}{i}") for i in range(5)]
    data = yaml.safe_load(sandbox3.inventory_path.read_text())
    data["defaults"]["env"] = {"A": f"a'; touch {sentinels[0]}; '", "B": f"$(touch {sentinels[1]})"}
    data["nodes"][1]["ray"] = f"/nonexistent'; touch {sentinels[2]}; '"
    data["network"] = {"env": {"NCCL_X": f'x"; touch {sentinels[3]}; "'}}
    data["ray"] = {"temp_dir": f"/tmp/h'$(touch {sentinels[4]})'", "wait_timeout_s": 20}
    path = tmp_path / "hostile.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        done = rtk("up", str(path))
        assert done.returncode == 4, done.stderr
        assert "ray start exited 127" in done.stderr
        assert "Traceback" not in done.stderr
    finally:
        down = rtk("down", str(path))
    assert down.returncode == 0, down.stderr
    assert [p for p in sentinels if p.exists()] == []
    assert _ray_processes(sandbox3) == {n: "" for n in node_names(sandbox3)}


def test_a_jump_host_carries_the_connections(
    sandbox3: Sandbox, tmp_path: Path, state_dir: Path
) -> None:
    head = sandbox3.nodes[0]
    data = yaml.safe_load(sandbox3.inventory_path.read_text())
    data["defaults"]["ssh"]["jump_host"] = f"root@{head.address}"
    path = tmp_path / "jump.yaml"
    path.write_text(yaml.safe_dump(data))
    done = rtk("exec", str(path), "--json", "--", "bash", "-c", 'echo "${SSH_CLIENT%% *}"')
    assert done.returncode == 0, done.stderr
    sources = {n["node"]: n["stdout"].strip() for n in json.loads(done.stdout)["nodes"]}
    # Every session arrives from the jump host, none straight from this machine.
    assert set(sources.values()) == {head.address}
