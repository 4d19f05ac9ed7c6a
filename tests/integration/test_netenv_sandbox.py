"""``rtk env`` and the env file of ``rtk up`` on a real 3-node sandbox (Ethernet only).

The sandbox ``sbnet`` (10.77.8.0/24) is this module's own: each node reaches the head
over its veth ``eth0`` and has no RDMA device, so auto must resolve to ethernet.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import require_sandbox_host, rtk

from toolkit.cluster.plan import build_plan
from toolkit.inventory import load_inventory
from toolkit.sandbox import Sandbox
from toolkit.shell import parse_env_file

pytestmark = pytest.mark.ray

NAME = "sbnet"
SUBNET = "10.77.8"
NETWORK_KEYS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "NCCL_NET", "NCCL_SOCKET_NTHREADS")


def rtk_env(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``rtk env ARGS`` as a user would."""
    return rtk("env", *args, env=env, timeout=120)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    from toolkit.sandbox import create, destroy

    require_sandbox_host()
    destroy(NAME)  # whatever an interrupted earlier run left behind
    created = create(3, name=NAME, subnet=SUBNET)
    try:
        yield created
    finally:
        created.destroy()


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {"RTK_STATE_DIR": str(tmp_path_factory.mktemp("netenv-state"))}


def node_interface(sandbox: Sandbox, name: str) -> str:
    """The node's own answer: the interface of its route to the head (or owning its IP)."""
    head = sandbox.nodes[0].address
    node = sandbox.node(name)
    done = sandbox.run_in(name, ["ip", "-o", "addr", "show", "to", node.address])
    owner = done.stdout.split()[1]
    if name != sandbox.nodes[0].name:
        route = sandbox.run_in(name, ["ip", "-o", "route", "get", head]).stdout.split()
        assert route[route.index("dev") + 1] == owner
    return owner


def test_rtk_env_shows_ethernet_on_every_node(sandbox: Sandbox, state: dict[str, str]) -> None:
    began = time.monotonic()
    done = rtk_env(str(sandbox.inventory_path), "--json", env=state)
    elapsed_s = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    print(f"rtk env on 3 sandbox nodes: {elapsed_s:.2f} s (probes {report['duration_s']} s)")
    assert report["failed"] == {}
    assert [n["name"] for n in report["nodes"]] == [n.name for n in sandbox.nodes]
    for node in report["nodes"]:
        interface = node_interface(sandbox, node["name"])
        assert interface != "lo"
        assert node["route"]["source_ip"] == sandbox.node(node["name"]).address
        assert node["detected"]["infiniband"] is False and node["detected"]["hcas"] == []
        assert node["detected"]["link"]["mtu"] > 0
        env = node["env"]
        assert env["requested"] == "auto" and env["profile"] == "ethernet"
        assert "no active InfiniBand or RoCE port" in env["profile_reason"]
        variables = env["variables"]
        assert variables["GLOO_SOCKET_IFNAME"]["value"] == interface
        assert variables["NCCL_SOCKET_IFNAME"]["value"] == interface
        assert variables["NCCL_NET"]["value"] == "Socket"
        assert all(v["reason"] for v in variables.values())
        assert not any(k.startswith("NCCL_IB_") for k in variables)
    text = rtk_env(str(sandbox.inventory_path), env=state)
    assert text.returncode == 0, text.stderr
    assert "3/3 node(s) settled" in text.stdout
    assert text.stdout.count("profile    ethernet (auto:") == 3
    assert "NCCL_NET=Socket" in text.stdout and "on the route to the head" in text.stdout


def test_rtk_env_refuses_ib_and_names_the_nodes(
    sandbox: Sandbox, state: dict[str, str], tmp_path: Path
) -> None:
    text = sandbox.inventory_path.read_text()
    assert "\nnetwork:" not in text
    inventory = tmp_path / "ib.yaml"  # the sandbox's key paths are absolute
    inventory.write_text(text + "network:\n  profile: ib\n")
    done = rtk_env(str(inventory), env=state)
    assert done.returncode == 4, done.stdout + done.stderr
    for node in sandbox.nodes:
        assert f"{node.name}: network.profile is ib, but no InfiniBand port is active" in (
            done.stderr
        )
    assert "found no RDMA devices" in done.stderr


def test_up_writes_the_profile_into_each_env_file(
    sandbox: Sandbox, state: dict[str, str], ray_available: None
) -> None:
    inventory = str(sandbox.inventory_path)
    plan = build_plan(load_inventory(inventory))
    done = rtk("up", inventory, "--json", env=state)
    try:
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert {n["network_profile"] for n in result["nodes"]} == {"ethernet"}
        for node in sandbox.nodes[1:]:
            cat = sandbox.run_in(node.name, ["cat", plan.paths.env_file])
            assert cat.returncode == 0, cat.stderr
            env = parse_env_file(cat.stdout)
            interface = node_interface(sandbox, node.name)
            assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == interface
            assert env["NCCL_NET"] == "Socket"
            assert int(env["NCCL_SOCKET_NTHREADS"]) * int(env["NCCL_NSOCKS_PERTHREAD"]) <= 64
            keys = list(env)
            at = keys.index("NCCL_SOCKET_IFNAME")
            assert keys[at + 1 : at + 4] == ["NCCL_NET", *NETWORK_KEYS[3:], "NCCL_NSOCKS_PERTHREAD"]
            # Ray inherits it: the raylet's environment carries the profile.
            pid = sandbox.run_in(node.name, ["pgrep", "-o", "raylet"]).stdout.split()[0]
            environ = sandbox.run_in(node.name, ["cat", f"/proc/{pid}/environ"]).stdout
            assert "NCCL_NET=Socket" in environ.split("\0")
    finally:
        down = rtk("down", inventory, env=state)
        assert down.returncode == 0, down.stderr
