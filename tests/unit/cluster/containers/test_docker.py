"""A node's container commands: their text pinned, then run by ``sh`` against a fake runtime.

The text is what ``--dry-run`` shows and what the executor runs; running it for real
(``tests/fake_runtime.py`` as docker and podman on PATH) checks what the text does:
the start waits for Ray and cleans up after a failure, and the removal takes exactly
rtk's container of the node, whatever else runs there.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from pathlib import Path

import fake_runtime
import pytest
import yaml
from conftest import REPO, rtk

from toolkit.cluster.containers.docker import (
    ContainerPlan,
    check_path_mounted,
    check_startable,
    container_name,
)
from toolkit.cluster.plan import RAY_READY_TEXT, ClusterPlan, build_plan
from toolkit.errors import ClusterError
from toolkit.inventory import Container, load_inventory

DATA = REPO / "tests" / "data"


@pytest.fixture
def boxes() -> ClusterPlan:
    cwd = Path.cwd()
    os.chdir(DATA)
    try:
        return build_plan(load_inventory("plan-containers.yaml"))
    finally:
        os.chdir(cwd)


def container_of(plan: ClusterPlan, name: str) -> ContainerPlan:
    found = next(n.container for n in plan.nodes if n.name == name)
    assert found is not None
    return found


# --- the text ------------------------------------------------------------------------


def test_names_and_labels(boxes: ClusterPlan) -> None:
    head = container_of(boxes, "gpu01")
    assert head.name == "rtk-boxes-gpu01"
    assert head.labels() == ("rtk.cluster=boxes", "rtk.node=gpu01")
    assert container_name("c1", "fe80::1") == "rtk-c1-fe80__1"


def test_run_argv_of_docker_with_its_own_shm(boxes: ClusterPlan) -> None:
    assert container_of(boxes, "gpu01").run_argv() == [
        "docker",
        "run",
        "-d",
        "--name",
        "rtk-boxes-gpu01",
        "--label",
        "rtk.cluster=boxes",
        "--label",
        "rtk.node=gpu01",
        "--network=host",
        "--shm-size=17179869184",
        "--init",
        "--gpus",
        "all",
        "-v",
        "/tmp/rtk-boxes:/tmp/rtk-boxes",
        "-v",
        "/tmp/rtk-boxes/rtk:/tmp/rtk-boxes/rtk:ro",
        "-v",
        "/scratch:/scratch",
        "--cap-add=SYS_ADMIN",
        "nvcr.io/nvidia/pytorch:25.02-py3",
    ]


def test_run_argv_of_podman_with_host_ipc_and_cdi_gpus(boxes: ClusterPlan) -> None:
    argv = container_of(boxes, "gpu02").run_argv()
    assert argv[:10] == [
        "podman",
        "run",
        "-d",
        "--name",
        "rtk-boxes-gpu02",
        "--label",
        "rtk.cluster=boxes",
        "--label",
        "rtk.node=gpu02",
        "--network=host",
    ]
    assert argv[10:14] == ["--ipc=host", "--init", "--device", "nvidia.com/gpu=all"]
    assert argv[-3:] == ["--security-opt", "label=disable", "localhost/rtk-ray:2.60"]
    assert not any(w.startswith("--shm-size") for w in argv)


def test_no_gpu_flag_for_a_node_without_gpus() -> None:
    spec = Container("docker", "img", gpus="auto")
    plan = ContainerPlan(
        spec=spec,
        name="rtk-c-n1",
        node="n1",
        gpus=spec.wants_gpus(0),
        temp_dir="/tmp/rtk-c",
        rtk_dir="/tmp/x",
        cluster="c",
    )
    assert "--gpus" not in plan.run_argv()


def test_a_host_path_is_written_inside_only_under_a_rw_mount_of_its_own_path(
    boxes: ClusterPlan,
) -> None:
    worker = container_of(boxes, "gpu02")
    assert worker.writes_host_path("/scratch/runs/r1")
    assert worker.writes_host_path("/scratch/")
    assert worker.writes_host_path(worker.temp_dir + "/session_latest")
    assert not worker.writes_host_path("/scratchy/r1")
    assert not worker.writes_host_path("/home/train/rtk-runs/r1")
    assert not worker.writes_host_path("~/rtk-runs/r1")
    assert not worker.writes_host_path("runs/r1")
    moved = dataclasses.replace(
        worker, spec=dataclasses.replace(worker.spec, mounts=("/data/runs:/runs:ro",))
    )
    assert not moved.writes_host_path("/data/runs/r1")  # mounted, but elsewhere inside
    read_only = dataclasses.replace(
        worker, spec=dataclasses.replace(worker.spec, mounts=("/scratch:/scratch:z,ro",))
    )
    assert not read_only.writes_host_path("/scratch/runs/r1")
    assert not worker.writes_host_path(worker.rtk_dir + "/r1")  # rtk's own: read-only


def test_a_run_dir_outside_the_containers_mounts_is_refused(boxes: ClusterPlan) -> None:
    containers = [n.container for n in boxes.nodes if n.container is not None]
    check_path_mounted(containers, "/scratch/rtk-runs/r1", "the run directory")
    check_path_mounted(containers, "s3://bucket/rtk-runs/r1", "the run directory")
    check_path_mounted([], "~/rtk-runs/r1", "the run directory")  # no container: no check
    with pytest.raises(ClusterError) as refused:
        check_path_mounted(containers, "/home/train/rtk-runs/r1", "the run directory")
    message = str(refused.value)
    assert (
        "the run directory /home/train/rtk-runs/r1 is not mounted at its own path (read-write)"
        in message
    )
    assert "containers of gpu[01-03]" in message
    assert "- /home/train/rtk-runs:/home/train/rtk-runs" in message
    assert "(/scratch)" in message
    with pytest.raises(ClusterError, match="~/rtk-runs/r1 is not an absolute path"):
        check_path_mounted(containers, "~/rtk-runs/r1", "the run directory")


def test_ray_starts_inside_after_the_env_file_and_blocks(boxes: ClusterPlan) -> None:
    worker = next(n for n in boxes.nodes if n.name == "gpu02")
    start = worker.start_command
    assert start.startswith("podman run -d --name rtk-boxes-gpu02 ")
    inner = (
        "sh -c 'set -a && . /tmp/rtk-boxes/rtk/node.env && set +a && exec ray start "
        "--address=10.10.0.11:6379 "
    )
    assert inner in start
    assert (
        ' --node-ip-address="$RTK_NODE_IP" --block\' >/dev/null && end=$(($(date +%s) + 118))'
        in (start)
    )
    # The host's ray start line (SSH variables unset, no --block) is not what runs here.
    assert "unset SSH_CLIENT" not in start


def test_remove_exec_and_probe_request_text(boxes: ClusterPlan) -> None:
    head = container_of(boxes, "gpu01")
    assert head.remove_command(8) == (
        "command -v docker >/dev/null || exit 0; ids=$(docker ps -aq --filter label=rtk.cluster=boxes --filter label=rtk.node=gpu01 "
        "--filter 'name=^rtk-boxes-gpu01$') && if [ -n \"$ids\" ]; then docker stop -t 8 $ids "
        ">/dev/null 2>&1; docker rm -f $ids; fi"
    )
    assert head.exec_command("ray status") == "docker exec -i rtk-boxes-gpu01 sh -c 'ray status'"
    assert head.exec_argv(["bash"], tty=True) == [
        "docker",
        "exec",
        "-i",
        "-t",
        "rtk-boxes-gpu01",
        "bash",
    ]
    assert json.loads(head.probe_request()) == {
        "runtime": "docker",
        "image": "nvcr.io/nvidia/pytorch:25.02-py3",
        "name": "rtk-boxes-gpu01",
        "labels": ["rtk.cluster=boxes", "rtk.node=gpu01"],
        "gpus": True,
    }


def test_nodes_without_a_container_keep_the_hosts_commands(boxes: ClusterPlan) -> None:
    cwd = Path.cwd()
    os.chdir(DATA)
    try:
        plain = build_plan(load_inventory("plan-3node.yaml"))
    finally:
        os.chdir(cwd)
    assert all(n.container is None for n in plain.nodes)
    assert all(" - probe " in n.probe_command and "{" not in n.probe_command for n in plain.nodes)


def test_up_refuses_pyxis_and_apptainer_over_ssh(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "cluster": "hpc",
                "defaults": {"container": {"runtime": "pyxis", "image": "nvcr.io#pytorch"}},
                "nodes": [
                    {"host": "n[1-3]"},
                    {"host": "m1", "container": {"runtime": "apptainer"}},
                    {"host": "d1", "container": {"runtime": "docker"}},
                ],
            }
        )
    )
    inv = load_inventory(path)
    with pytest.raises(ClusterError) as raised:
        check_startable(inv, inv.nodes)
    text = str(raised.value)
    assert "n[1-3]: container.runtime pyxis: pyxis exists only inside srun" in text
    assert "m1: container.runtime apptainer: apptainer containers are started by SLURM" in text
    assert "d1" not in text
    done = rtk("up", str(path), "--dry-run")
    assert done.returncode == 4
    assert "pyxis exists only inside srun" in done.stderr
    assert "Traceback" not in done.stderr


# --- the text, run -------------------------------------------------------------------


@pytest.fixture
def node_shell(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A fake docker and podman on PATH, and the environment that runs them."""
    state = tmp_path / "runtime.json"
    fake_runtime.install(tmp_path / "bin", state)
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "FAKE_RUNTIME_STATE": str(state),
    }
    return state, env


def sh(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def plan_for(image: str, runtime: str = "docker") -> ContainerPlan:
    spec = Container(runtime, image)
    return ContainerPlan(
        spec=spec,
        name="rtk-c-n1",
        node="n1",
        gpus=False,
        temp_dir="/tmp/rtk-c",
        rtk_dir="/tmp/rtk-c/rtk",
        cluster="c",
    )


def test_start_waits_until_ray_says_it_started(node_shell: tuple[Path, dict[str, str]]) -> None:
    state, env = node_shell
    plan = plan_for("ray:ok")
    began = time.monotonic()
    done = sh(plan.start_command("exec ray start --block", RAY_READY_TEXT, 30), env)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began >= 0.9  # two polls 0.5 s apart before it was ready
    (box,) = fake_runtime.load(state)["containers"]
    assert (box["name"], box["state"]) == ("rtk-c-n1", "running")
    assert box["labels"] == {"rtk.cluster": "c", "rtk.node": "n1"}
    assert box["argv"] == ["sh", "-c", "exec ray start --block"]


@pytest.mark.parametrize(
    ("image", "timeout_s", "said"),
    [
        ("ray:crash", 30, "raylet exited: address already in use"),
        ("ray:hang", 3, "was not ready within 1 s"),
    ],
)
def test_a_start_that_fails_shows_the_log_and_leaves_no_container(
    node_shell: tuple[Path, dict[str, str]], image: str, timeout_s: float, said: str
) -> None:
    state, env = node_shell
    done = sh(
        plan_for(image).start_command("exec ray start --block", RAY_READY_TEXT, timeout_s), env
    )
    assert done.returncode == 1
    assert "rtk: Ray did not start in container rtk-c-n1" in done.stderr
    assert said in done.stderr
    assert fake_runtime.names(state) == set()


def test_a_start_without_the_image_fails_with_the_runtimes_word(
    node_shell: tuple[Path, dict[str, str]],
) -> None:
    state, env = node_shell
    done = sh(plan_for("ray:absent", "podman").start_command("true", RAY_READY_TEXT, 30), env)
    assert done.returncode == 125
    assert "Unable to find image 'ray:absent' locally" in done.stderr


def test_remove_takes_exactly_rtks_container_of_the_node(
    node_shell: tuple[Path, dict[str, str]],
) -> None:
    state, env = node_shell
    own = fake_runtime.add_container(state, "rtk-c-n1", {"rtk.cluster": "c", "rtk.node": "n1"})
    others = {
        # the same labels under another name (the name is anchored)
        "rtk-c-n10": {"rtk.cluster": "c", "rtk.node": "n1"},
        # another node's and another cluster's
        "rtk-c-n2": {"rtk.cluster": "c", "rtk.node": "n2"},
        "rtk-other-n1": {"rtk.cluster": "other", "rtk.node": "n1"},
        # someone's own, named like rtk's without its labels
        "xrtk-c-n1": {},
        "notebook": {"rtk.cluster": "c"},
    }
    for name, labels in others.items():
        fake_runtime.add_container(state, name, labels)
    done = sh(plan_for("ray:ok").remove_command(8), env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [own]
    assert fake_runtime.names(state) == set(others)
    # Nothing left to remove: still fine, and nothing else goes.
    again = sh(plan_for("ray:ok").remove_command(8), env)
    assert (again.returncode, again.stdout) == (0, "")
    assert fake_runtime.names(state) == set(others)
    calls = fake_runtime.load(state)["calls"]
    assert "docker stop -t 8 " + own in calls
    assert "docker rm -f " + own in calls


def test_remove_on_a_node_without_the_runtime_has_nothing_to_do(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}
    done = subprocess.run(
        ["/bin/sh", "-c", plan_for("ray:ok").remove_command(8)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_remove_fails_when_the_runtime_does_not_answer(
    node_shell: tuple[Path, dict[str, str]],
) -> None:
    state, env = node_shell
    fake_runtime.add_container(state, "rtk-c-n1", {"rtk.cluster": "c", "rtk.node": "n1"})
    data = fake_runtime.load(state)
    data["down"] = True
    fake_runtime.save(state, data)
    done = sh(plan_for("ray:ok").remove_command(8), env)
    assert done.returncode != 0
    assert "Cannot connect to the docker daemon" in done.stderr


def test_exec_runs_in_the_running_container_only(node_shell: tuple[Path, dict[str, str]]) -> None:
    state, env = node_shell
    plan = plan_for("ray:ok")
    fake_runtime.add_container(state, "rtk-c-n1", {"rtk.cluster": "c", "rtk.node": "n1"})
    done = sh(plan.exec_command("echo in the box; exit 3"), env)
    assert (done.returncode, done.stdout) == (3, "in the box\n")
    sh(plan.remove_command(8), env)
    done = sh(plan.exec_command("true"), env)
    assert done.returncode == 1
    assert "not running" in done.stderr


def test_cli_dry_run_shows_the_container_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATA)
    golden = REPO / "tests" / "golden"
    done = rtk("up", "plan-containers.yaml", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (golden / "plan-containers.up-summary.txt").read_text()
    done = rtk("down", "plan-containers.yaml", "--dry-run", "--full")
    assert done.stdout == (golden / "plan-containers.down.txt").read_text()
    done = rtk("exec", "plan-containers.yaml", "--dry-run", "--", "nvidia-smi", "-L")
    assert done.returncode == 0, done.stderr
    assert (
        "  [gpu[02-03]] podman exec -i rtk-boxes-<name> sh -c 'if [ -f "
        "/tmp/rtk-boxes/rtk/node.env ]; then set -a && . /tmp/rtk-boxes/rtk/node.env && "
        "set +a; fi; nvidia-smi -L'\n"
    ) in done.stdout


def test_agent_commands_that_import_ray_run_in_the_heads_container(boxes: ClusterPlan) -> None:
    # With a dashboard, status asks it over HTTP: the host's Python does.
    assert boxes.status_command().startswith("set -a && . /tmp/rtk-boxes/rtk/node.env && ")
    assert " python3 - status http://10.10.0.11:8265 " in boxes.status_command()
    assert boxes.smoke_command() == (
        "docker exec -i rtk-boxes-gpu01 sh -c 'set -a && . /tmp/rtk-boxes/rtk/node.env && "
        "set +a && python3 - smoke 10.10.0.11:6379 gpu01,gpu02,gpu03'"
    )
    ray = boxes.inventory.ray.model_copy(update={"include_dashboard": False})
    plain = build_plan(dataclasses.replace(boxes.inventory, ray=ray))
    assert plain.status_command() == (
        "docker exec -i rtk-boxes-gpu01 sh -c 'set -a && . /tmp/rtk-boxes/rtk/node.env && "
        "set +a && python3 - status - 10.10.0.11:6379'"
    )
