"""Ray in podman containers on a real 3-node sandbox: ``rtk up`` with ``container:``.

The sandbox ``sbpod`` (10.77.24.0/24) is this module's own. Podman is daemonless, so
``podman run --network=host`` over SSH joins the node's network namespace; each node
has its own podman storage (the sandbox's), so the image is put on every node, as a
real cluster needs: ``scripts/container-image.sh`` builds a Debian root filesystem
with debootstrap once (cached), and each node imports it. No registry is reached.
The venv running these tests is mounted into the containers at its own path (and its
base Python, unless that is the image's /usr), so Ray inside is this Ray.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, require, require_sandbox_host, rtk
from gloo_allreduce import GLOO_ALLREDUCE

from toolkit.cluster.containers.docker import CLUSTER_LABEL, container_name
from toolkit.cluster.plan import build_plan
from toolkit.cluster.smoke import run_smoke
from toolkit.inventory import load_inventory
from toolkit.sandbox import Sandbox
from toolkit.shell import quote, with_env_file
from toolkit.transport import SshTransport

pytestmark = pytest.mark.ray

NAME = "sbpod"
SUBNET = "10.77.24"
FOREIGN = "not-rtk-sleeper"
IMAGE_SCRIPT = REPO / "scripts" / "container-image.sh"
# crun (podman's default) refuses a host whose cgroup v2 hierarchy holds controllers
# beside cgroup v1's ("hybrid mode"); runc does not.
HYBRID_CGROUPS = Path("/sys/fs/cgroup/unified/cgroup.controllers")
CAP_SYS_RESOURCE = 24


def runtime_options() -> list[str]:
    """The ``podman run`` options this machine needs, from its cgroups and capabilities.

    Where crun refuses hybrid cgroups, runc. Without CAP_SYS_RESOURCE podman's default
    limits (a million open files) are above what the runtime may set: the host's own
    hard limits then (processes at most pid_max, which podman caps them at).
    """
    options = []
    if HYBRID_CGROUPS.exists() and HYBRID_CGROUPS.read_text(encoding="utf-8").split():
        require(shutil.which("runc") is not None, "runc is needed here (crun refuses hybrid)")
        options.append("--runtime=runc")
    status = Path("/proc/self/status").read_text(encoding="utf-8")
    effective = int(
        next(ln.split()[1] for ln in status.splitlines() if ln.startswith("CapEff")), 16
    )
    if not effective >> CAP_SYS_RESOURCE & 1:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text(encoding="utf-8"))
        nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], pid_max)
        options += [f"--ulimit=nofile={nofile}:{nofile}", f"--ulimit=nproc={nproc}:{nproc}"]
    return options


def python_mounts() -> list[str]:
    """This venv at its own path, read-only, and its base Python unless the image's."""
    paths = [sys.prefix]
    if sys.base_prefix not in (sys.prefix, "/usr"):
        paths.append(sys.base_prefix)
    return [f"{p}:{p}:ro" for p in paths]


def on_node(sandbox: Sandbox, node: str, command: str, timeout_s: float = 120) -> str:
    """Run shell text ``command`` on ``node`` over SSH; its stdout (fails on exit != 0)."""
    done = subprocess.run(
        sandbox.ssh_argv(node, command),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, f"{node}: {command}: {done.stderr}"
    return done.stdout


def containers(sandbox: Sandbox, node: str) -> dict[str, str]:
    """Every container on ``node`` (``podman ps -a``): name -> state."""
    out = on_node(sandbox, node, "podman ps -a --format json")
    return {c["Names"][0]: c["State"] for c in json.loads(out or "[]")}


@pytest.fixture(scope="module")
def image_tar() -> tuple[str, str]:
    """The image's root filesystem tar (built once, cached) and the image's name."""
    require_sandbox_host()
    require(shutil.which("podman") is not None, "podman is not installed (apt install podman)")
    require(shutil.which("debootstrap") is not None, "debootstrap is not installed")
    done = subprocess.run(
        [str(IMAGE_SCRIPT)], capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, done.stderr
    tar_path = done.stdout.split()[-1]
    tag = Path(tar_path).name.removeprefix("rtk-ray-test-").removesuffix(".tar")
    return tar_path, f"localhost/rtk-ray-test:{tag}"


@pytest.fixture(scope="module")
def sandbox(image_tar: tuple[str, str]) -> Iterator[Sandbox]:
    """The module's sandbox, the image in each node's podman, a foreign container on each."""
    from toolkit.sandbox import create, destroy

    tar_path, image = image_tar
    destroy(NAME)  # whatever an interrupted earlier run left behind
    created = create(3, name=NAME, subnet=SUBNET)
    try:
        options = " ".join(quote(o) for o in runtime_options())
        put = f"podman import -q {quote(tar_path)} {quote(image)} >/dev/null && " + (
            f"podman run -d --name {FOREIGN} --init {options} {quote(image)} sleep 100000"
        )
        names = [n.name for n in created.nodes]
        with ThreadPoolExecutor(len(names)) as pool:
            list(pool.map(lambda n: on_node(created, n, put, timeout_s=300), names))
        yield created
    finally:
        created.destroy()


@pytest.fixture(scope="module")
def inventory(sandbox: Sandbox, image_tar: tuple[str, str], tmp_path_factory: Any) -> Path:
    """The sandbox's inventory with Ray in podman containers of the image."""
    data = yaml.safe_load(sandbox.inventory_path.read_text(encoding="utf-8"))
    data["defaults"]["ray"] = str(Path(sys.prefix) / "bin" / "ray")
    data["defaults"]["container"] = {
        "runtime": "podman",
        "image": image_tar[1],
        "mounts": python_mounts(),
        "options": runtime_options(),
    }
    path = tmp_path_factory.mktemp("container") / "inventory.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {"RTK_STATE_DIR": str(tmp_path_factory.mktemp("container-state"))}


@pytest.fixture(scope="module")
def cluster(
    inventory: Path, state: dict[str, str], ray_available: None
) -> Iterator[dict[str, Any]]:
    done = rtk("up", str(inventory), "--json", env=state)
    assert done.returncode == 0, done.stderr
    yield json.loads(done.stdout)
    rtk("down", str(inventory), env=state)


def test_up_runs_ray_in_a_container_on_every_node(
    cluster: dict[str, Any], sandbox: Sandbox
) -> None:
    names = [n.name for n in sandbox.nodes]
    assert sorted(cluster["started"]) == names
    assert cluster["status"]["alive"] == names
    for node in names:
        assert containers(sandbox, node) == {
            container_name(NAME, node): "running",
            FOREIGN: "running",
        }
        labels = on_node(
            sandbox,
            node,
            f"podman inspect --format '{{{{json .Config.Labels}}}}' rtk-{NAME}-{node}",
        )
        assert json.loads(labels)[CLUSTER_LABEL] == NAME


def test_up_again_finds_the_running_containers(
    cluster: dict[str, Any], inventory: Path, state: dict[str, str]
) -> None:
    done = rtk("up", str(inventory), "--json", env=state)
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    assert again["started"] == []
    assert {n["action"] for n in again["nodes"]} == {"already running"}


def test_a_ray_task_lands_on_every_node(
    cluster: dict[str, Any], inventory: Path, sandbox: Sandbox
) -> None:
    plan = build_plan(load_inventory(inventory))
    with SshTransport() as transport:
        ran = run_smoke(plan, transport)
    assert {name: where["hostname"] for name, where in ran.items()} == {
        n.name: n.name for n in sandbox.nodes
    }


def test_gloo_allreduce_across_the_containers(
    cluster: dict[str, Any], inventory: Path, sandbox: Sandbox
) -> None:
    require(find_spec("torch") is not None, "torch is not installed (pip install '.[train]')")
    plan = build_plan(load_inventory(inventory))
    head = plan.head
    assert head.container is not None
    hosts = ",".join(n.name for n in sandbox.nodes)
    command = head.container.exec_command(
        with_env_file(plan.paths.env_file, f"HOSTS={hosts} python3 -")
    )
    with SshTransport() as transport:
        result = transport.run(head.node, command, stdin=GLOO_ALLREDUCE, timeout_s=300)
    assert result.ok, result.tail(40)
    ranks = json.loads(result.stdout.strip().splitlines()[-1])
    assert [r["sum"] for r in ranks] == [6.0, 6.0, 6.0]
    assert sorted(r["host"] for r in ranks) == [n.name for n in sandbox.nodes]
    assert all(r["in_container"] for r in ranks)


def test_down_removes_rtk_containers_and_no_other(
    cluster: dict[str, Any], inventory: Path, sandbox: Sandbox, state: dict[str, str]
) -> None:
    done = rtk("down", str(inventory), env=state)
    assert done.returncode == 0, done.stderr
    for node in [n.name for n in sandbox.nodes]:
        assert containers(sandbox, node) == {FOREIGN: "running"}
        ray = on_node(sandbox, node, "pgrep -c -f [r]ay/core/src/ray || true").strip()
        assert ray == "0", f"{node}: Ray processes left after rtk down"
        on_node(sandbox, node, f"podman rm -f -t 0 {FOREIGN} >/dev/null")
