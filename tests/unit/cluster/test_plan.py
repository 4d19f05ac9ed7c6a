"""The plan --dry-run prints, pinned as whole text (set RTK_UPDATE_GOLDEN=1 to rewrite)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import REPO, rtk

from toolkit.cluster.plan import build_plan, fill_env
from toolkit.cluster.plan_text import render_down, render_down_summary, render_up, render_up_summary
from toolkit.inventory import load_inventory

DATA = REPO / "tests" / "data"
GOLDEN = REPO / "tests" / "golden"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("RTK_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"plan text changed; diff against {path}"


@pytest.fixture
def in_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATA)


@pytest.mark.parametrize("name", ["plan-3node", "plan-single", "plan-containers"])
def test_up_plan_text(name: str, in_data: None) -> None:
    plan = build_plan(load_inventory(f"{name}.yaml"))
    check_golden(f"{name}.up.txt", render_up(plan))


@pytest.mark.parametrize("name", ["plan-3node", "plan-single", "plan-containers"])
def test_summary_plan_text(name: str, in_data: None) -> None:
    plan = build_plan(load_inventory(f"{name}.yaml"))
    check_golden(f"{name}.up-summary.txt", render_up_summary(plan))
    check_golden(f"{name}.down-summary.txt", render_down_summary(plan))


@pytest.mark.parametrize("name", ["plan-3node", "plan-single", "plan-containers"])
def test_down_plan_text(name: str, in_data: None) -> None:
    plan = build_plan(load_inventory(f"{name}.yaml"))
    check_golden(f"{name}.down.txt", render_down(plan))


def test_plan_structure(in_data: None) -> None:
    plan = build_plan(load_inventory("plan-3node.yaml"))
    assert [n.name for n in plan.nodes] == ["gpu01", "gpu02", "gpu03"]
    assert plan.head.role == "head"
    assert plan.head_address == "10.10.0.11:6379"
    assert plan.dashboard_url == "http://10.10.0.11:8265"
    # Only the head opens the GCS, dashboard and client ports.
    assert 6379 in plan.head.ports
    assert all(6379 not in w.ports for w in plan.workers)
    worker = plan.workers[0]
    assert "--address=10.10.0.11:6379" in worker.start_command
    assert "--head" not in worker.start_command
    assert worker.start_command.count("/opt/venvs/rtk/bin/python -m ray.scripts.scripts") == 1
    env = fill_env(worker, {"node_ip": "10.10.0.12", "interface": "eth1"})
    assert env["RTK_NODE_IP"] == "10.10.0.12"
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "eth1"
    assert env["NCCL_DEBUG"] == "WARN"  # node env
    assert env["NCCL_IB_TIMEOUT"] == "22"  # network env
    assert env["OMP_NUM_THREADS"] == "8"  # defaults env, int given as string
    assert env["RAY_AUTH_MODE"] == "token"
    assert "auth_token" in env["RAY_AUTH_TOKEN_PATH"]
    # ray.tls: every Ray process on the node reads its certificate, key and the CA.
    assert {k: v for k, v in env.items() if "TLS" in k} == {
        "RAY_USE_TLS": "1",
        "RAY_TLS_SERVER_CERT": "/tmp/rtk-golden/rtk/tls_node.crt",
        "RAY_TLS_SERVER_KEY": "/tmp/rtk-golden/rtk/tls_node.key",
        "RAY_TLS_CA_CERT": "/tmp/rtk-golden/rtk/tls_ca.crt",
    }


def test_fill_env_needs_every_fact(in_data: None) -> None:
    plan = build_plan(load_inventory("plan-3node.yaml"))
    with pytest.raises(KeyError, match="interface"):
        fill_env(plan.head, {"node_ip": "10.10.0.11"})


def test_interface_override_needs_no_detection(in_data: None) -> None:
    plan = build_plan(load_inventory("plan-single.yaml"))
    env = fill_env(plan.head, {"node_ip": "127.0.0.1"})
    assert env["GLOO_SOCKET_IFNAME"] == "lo"
    assert env["RAY_AUTH_MODE"] == "disabled"
    assert "RAY_AUTH_TOKEN_PATH" not in env
    assert not [k for k in env if "TLS" in k]  # ray.tls is off unless asked


def test_cli_dry_run_prints_the_plan_and_touches_nothing(
    in_data: None, state_dir: Path, tmp_path: Path
) -> None:
    done = rtk("up", "plan-3node.yaml", "--dry-run", "--full")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (GOLDEN / "plan-3node.up.txt").read_text()
    # TLS files are named, never their contents, and nothing is made for them.
    assert "tls_node.key" in done.stdout
    assert "PRIVATE KEY" not in done.stdout and "CERTIFICATE" not in done.stdout
    assert not state_dir.exists()
    done = rtk("up", "plan-single.yaml", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert not Path("/tmp/rtk-single").exists()
    done = rtk("down", "plan-single.yaml", "--dry-run", "--full")
    assert done.stdout == (GOLDEN / "plan-single.down.txt").read_text()
