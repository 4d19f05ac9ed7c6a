"""Nodes set up a little wrong, as a new user's are: rtk up names the node and the cause.

Each test breaks one thing on a real 2-node sandbox (a full, read-only or shared temp
dir, a port another program holds, a Python without Ray or with another Ray than the
head's, a head port a firewall drops), runs ``rtk up`` as a user would, and checks
three things: one line that names the node and the cause, no traceback unless
``--verbose``, and no Ray process left on any node.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import require_sandbox_host, rtk

from toolkit.errors import ClusterError
from toolkit.sandbox import Sandbox

pytestmark = pytest.mark.ray

TEMP_DIR = "/tmp/rtk-sbup"  # the sandbox cluster's Ray temp dir (rtk's default for it)
RAY_PROCESSES = "raylet|gcs_server|ray.scripts|dashboard|log_monitor|runtime_env"


@pytest.fixture(scope="module")
def sandbox(ray_available: None) -> Iterator[Sandbox]:
    from toolkit.sandbox import create, destroy

    require_sandbox_host()
    destroy("sbup")
    box = create(2, name="sbup", subnet="10.77.28")
    try:
        yield box
    finally:
        box.destroy()


@pytest.fixture
def state(tmp_path: Path) -> dict[str, str]:
    return {"RTK_STATE_DIR": str(tmp_path / "state")}


def sh(sandbox: Sandbox, node: str, script: str) -> str:
    done = sandbox.run_in(node, ["bash", "-c", script], timeout_s=60)
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


def inventory(sandbox: Sandbox, tmp_path: Path, **changes: Any) -> str:
    """The sandbox's inventory, with ``node2`` (the worker) and ``ray`` changed."""
    data = yaml.safe_load(sandbox.inventory_path.read_text())
    node2 = changes.pop("node2", None)
    if node2:
        data["nodes"][1].update(node2)
    data.setdefault("ray", {}).update(changes.pop("ray", {}))
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def up_fails(path: str, state: dict[str, str], *extra: str) -> list[str]:
    """``rtk up`` that must fail: its lines beginning ``rtk:``."""
    done = rtk("up", path, "--no-preflight", *extra, env=state, timeout=240)
    assert done.returncode == ClusterError.exit_code, done.stdout + done.stderr
    if "--verbose" not in extra:
        assert "Traceback" not in done.stderr and 'File "' not in done.stderr, done.stderr
    return [line for line in done.stderr.splitlines() if line.startswith("rtk:")]


def assert_nothing_left(sandbox: Sandbox) -> None:
    for node in ("node1", "node2"):
        left = sh(sandbox, node, f"pgrep -af '{RAY_PROCESSES}' | grep -v pgrep || true")
        assert left.strip() == "", f"{node}: {left}"


@pytest.fixture
def broken(sandbox: Sandbox) -> Iterator[list[tuple[str, str]]]:
    """Undo scripts (node, script) the test registers, run whatever happened."""
    undo: list[tuple[str, str]] = []
    yield undo
    for node, script in reversed(undo):
        sandbox.run_in(node, ["bash", "-c", script], timeout_s=60)
    for node in ("node1", "node2"):
        sandbox.run_in(node, ["bash", "-c", f"rm -rf {TEMP_DIR}"], timeout_s=60)


def mount_temp(sandbox: Sandbox, node: str, options: str, undo: list[tuple[str, str]]) -> None:
    sh(sandbox, node, f"mkdir -p {TEMP_DIR} && mount -t tmpfs -o {options} tmpfs {TEMP_DIR}")
    undo.append((node, f"umount {TEMP_DIR}"))


def test_a_full_temp_dir_on_the_head(
    sandbox: Sandbox, tmp_path: Path, state: dict[str, str], broken: list[tuple[str, str]]
) -> None:
    mount_temp(sandbox, "node1", "size=64k", broken)
    lines = up_fails(inventory(sandbox, tmp_path), state)
    assert lines == [
        f"rtk: head node1 failed: node1: Ray's temp dir {TEMP_DIR} has 64 KiB free (tmpfs at "
        f"{TEMP_DIR}); Ray needs at least 256 MiB there for its logs and sockets: free some, "
        "or set ray.temp_dir in the inventory to a directory on a local disk with room"
    ]
    assert_nothing_left(sandbox)


def test_a_read_only_temp_dir_on_the_head(
    sandbox: Sandbox, tmp_path: Path, state: dict[str, str], broken: list[tuple[str, str]]
) -> None:
    mount_temp(sandbox, "node1", "ro,size=1g", broken)
    (line,) = up_fails(inventory(sandbox, tmp_path), state)
    assert line.startswith(f"rtk: head node1 failed: node1: Ray's temp dir {TEMP_DIR} is on a ")
    assert "read-only file system (tmpfs at" in line
    assert_nothing_left(sandbox)


def test_a_port_another_program_holds(
    sandbox: Sandbox, tmp_path: Path, state: dict[str, str], broken: list[tuple[str, str]]
) -> None:
    python = yaml.safe_load(sandbox.inventory_path.read_text())["defaults"]["python"]
    listen = (
        "import socket,time;s=socket.socket();s.bind(('0.0.0.0',6380));s.listen();time.sleep(300)"
    )
    sh(sandbox, "node1", f'setsid {python} -c "{listen}" >/dev/null 2>&1 & sleep 1')
    broken.append(("node1", "pkill -f 'time.sleep\\(300\\)' || true"))
    (line,) = up_fails(inventory(sandbox, tmp_path), state)
    assert line.startswith(
        "rtk: head node1 failed: node1: port(s) already in use: 6380 (node_manager) by python"
    )
    assert line.endswith("; stop it or choose other ports in the inventory's ports: section")
    assert_nothing_left(sandbox)


def test_a_python_without_ray(
    sandbox: Sandbox, tmp_path: Path, state: dict[str, str], broken: list[tuple[str, str]]
) -> None:
    python = yaml.safe_load(sandbox.inventory_path.read_text())["defaults"]["python"]
    # The same Python without its site-packages: the standard library, and no Ray.
    sh(
        sandbox,
        "node2",
        f"printf '#!/bin/sh\\nexec {python} -S \"$@\"\\n' > /tmp/bare && chmod +x /tmp/bare",
    )
    broken.append(("node2", "rm -f /tmp/bare"))
    lines = up_fails(inventory(sandbox, tmp_path, node2={"python": "/tmp/bare"}), state)
    assert lines[0] == "rtk: cluster sbup: fewer than min_nodes=2 node(s) came up"
    assert lines[1].startswith("rtk:   node2: its Python ")
    assert lines[1].endswith(
        "has no Ray (No module named 'ray'): install ray[default]==2.60.0 there, or set "
        "python: in the inventory to one that has it"
    )
    assert_nothing_left(sandbox)


def test_a_ray_version_unlike_the_heads(
    sandbox: Sandbox, tmp_path: Path, state: dict[str, str], broken: list[tuple[str, str]]
) -> None:
    python = yaml.safe_load(sandbox.inventory_path.read_text())["defaults"]["python"]
    # Metadata of another Ray ahead of the real one on sys.path: what the node's Python
    # reports as its Ray, as a venv with another release would.
    sh(
        sandbox,
        "node2",
        "mkdir -p /tmp/old/ray-2.59.0.dist-info && "
        "printf 'Metadata-Version: 2.1\\nName: ray\\nVersion: 2.59.0\\n' "
        "> /tmp/old/ray-2.59.0.dist-info/METADATA && "
        f"printf '#!/bin/sh\\nPYTHONPATH=/tmp/old exec {python} \"$@\"\\n' > /tmp/oldray && "
        "chmod +x /tmp/oldray",
    )
    broken.append(("node2", "rm -rf /tmp/old /tmp/oldray"))
    lines = up_fails(inventory(sandbox, tmp_path, node2={"python": "/tmp/oldray"}), state)
    assert lines[1] == (
        "rtk:   node2: Ray 2.59.0 here, 2.60.0 on the head node1: every node needs the same "
        "Ray; install ray[default]==2.60.0 in " + python
    )
    assert_nothing_left(sandbox)


def test_a_temp_dir_shared_by_the_nodes(
    sandbox: Sandbox, tmp_path: Path, state: dict[str, str], broken: list[tuple[str, str]]
) -> None:
    # A host directory both nodes see (their /tmp is their own): a shared file system.
    shared = tempfile.mkdtemp(prefix="rtk-sbup-shared-", dir="/var/tmp")
    try:
        for node in ("node1", "node2"):
            sh(sandbox, node, f"mkdir -p {TEMP_DIR} && mount --bind {shared} {TEMP_DIR}")
            broken.append((node, f"umount {TEMP_DIR}"))
        lines = up_fails(inventory(sandbox, tmp_path), state)
        assert lines[1].startswith(
            f"rtk:   node2: Ray's temp dir {TEMP_DIR} is shared with node1 ("
        )
        assert lines[1].endswith(
            "each node needs its own: set ray.temp_dir in the inventory to a directory on a "
            "local disk"
        )
        assert_nothing_left(sandbox)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_a_head_port_a_firewall_drops(
    sandbox: Sandbox, tmp_path: Path, state: dict[str, str], broken: list[tuple[str, str]]
) -> None:
    rule = "INPUT -p tcp --dport 6379 -s 10.77.28.12 -j DROP"
    sh(sandbox, "node1", f"iptables -A {rule}")
    broken.append(("node1", f"iptables -D {rule}"))
    # Long enough for the head to start on a loaded machine (it took 11 s in a CI run),
    # short enough that node2's start, which cannot reach the GCS, times out soon.
    path = inventory(sandbox, tmp_path, ray={"start_timeout_s": 30})
    # One bring-up (each waits out node2's 30 s): --verbose prints the same cause, and
    # what it was read from, marked per node. Without --verbose, no traceback is
    # printed for any failed bring-up: the other tests here check that.
    verbose = rtk("up", path, "--no-preflight", "--verbose", env=state, timeout=240)
    assert verbose.returncode == ClusterError.exit_code, verbose.stdout + verbose.stderr
    lines = [line for line in verbose.stderr.splitlines() if line.startswith("rtk:")]
    assert len(lines) >= 2, lines
    assert lines[1] == (
        "rtk:   node2: cannot reach the head node1 on port 6379 (gcs): timed out, though it "
        "reaches 2 other ports of it: a firewall between the nodes? open these ports to the "
        "other nodes, or choose others in the inventory's ports: section"
    )
    assert "node2          | node2: command ran past its 30 s limit" in verbose.stderr
    assert_nothing_left(sandbox)
