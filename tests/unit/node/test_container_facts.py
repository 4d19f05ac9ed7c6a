"""The node agent's container facts, from a runtime on PATH (``tests/fake_runtime.py``).

The agent runs the runtime as a subprocess, as it would on a node; the fake answers
the way docker and podman do (a daemon that is down, an image that is not there, a
container of another name). The answer is then read by ``ProbeFacts`` on the host.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fake_runtime
import pytest

from toolkit.errors import ClusterError
from toolkit.node import agent
from toolkit.nodeinfo.probe import ContainerFacts, ProbeFacts

LABELS = {"rtk.cluster": "c", "rtk.node": "n1"}


def request(runtime: str = "docker", image: str = "ray:ok", gpus: bool = False) -> str:
    return json.dumps(
        {
            "runtime": runtime,
            "image": image,
            "name": "rtk-c-n1",
            "labels": [f"{k}={v}" for k, v in LABELS.items()],
            "gpus": gpus,
        }
    )


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake docker and podman alone on PATH; their state file."""
    path = tmp_path / "runtime.json"
    fake_runtime.install(tmp_path / "bin", path)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("FAKE_RUNTIME_STATE", str(path))
    return path


def test_runtime_not_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    facts = agent.container_facts(request("podman"))
    assert facts["path"] is None
    assert facts["error"] == "podman not found on PATH"
    assert facts["image_present"] is None


def test_a_daemon_that_does_not_answer(state: Path) -> None:
    data = fake_runtime.load(state)
    data["down"] = True
    fake_runtime.save(state, data)
    facts = agent.container_facts(request())
    assert facts["path"].endswith("/docker")
    assert facts["error"] == "Cannot connect to the docker daemon. Is it running?"
    assert facts["state"] is None


def test_image_there_or_not_and_how_each_runtime_is_asked(state: Path) -> None:
    assert agent.container_facts(request("docker", "ray:ok"))["image_present"] is True
    assert agent.container_facts(request("podman", "ray:absent"))["image_present"] is False
    calls = fake_runtime.load(state)["calls"]
    assert "docker image inspect --format '{{.Id}}' ray:ok" in calls
    assert "podman image exists ray:absent" in calls
    assert "docker version --format '{{.Server.Version}}'" in calls


def test_the_state_of_rtks_container_only(state: Path) -> None:
    assert agent.container_facts(request())["state"] is None
    fake_runtime.add_container(state, "rtk-c-n10", LABELS)
    fake_runtime.add_container(state, "rtk-c-n1", {"rtk.cluster": "other", "rtk.node": "n1"})
    assert agent.container_facts(request())["state"] is None
    data = fake_runtime.load(state)
    data["containers"] = []
    fake_runtime.save(state, data)
    fake_runtime.add_container(state, "rtk-c-n1", LABELS, running=False)
    assert agent.container_facts(request())["state"] == "exited"


def test_docker_gpus_through_its_nvidia_runtime_or_the_hook(state: Path, tmp_path: Path) -> None:
    facts = agent.container_facts(request(gpus=True))
    assert facts["gpu_hook"] == {"found": True, "via": "docker's nvidia runtime"}
    data = fake_runtime.load(state)
    data["runtimes"] = {"runc": {}}
    fake_runtime.save(state, data)
    assert agent.container_facts(request(gpus=True))["gpu_hook"] == {"found": False, "via": ""}
    hook = tmp_path / "bin" / agent.NVIDIA_HOOK
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    assert agent.container_facts(request(gpus=True))["gpu_hook"] == {
        "found": True,
        "via": str(hook),
    }
    assert agent.container_facts(request(gpus=False))["gpu_hook"] is None


def test_podman_gpus_through_a_cdi_spec(state: Path, tmp_path: Path) -> None:
    etc, run = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    etc.mkdir()
    (etc / "other.yaml").write_text("cdiVersion: 0.5.0\nkind: vendor.com/fpga\n")
    (etc / "notes.txt").write_text("nvidia.com/gpu\n")
    dirs = (str(etc), str(run))
    found = agent.container_facts(request("podman", gpus=True), dirs)["gpu_hook"]
    assert found == {"found": False, "via": ""}
    run.mkdir()
    (run / "nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n")
    found = agent.container_facts(request("podman", gpus=True), dirs)["gpu_hook"]
    assert found == {"found": True, "via": str(run / "nvidia.yaml")}


def test_the_probe_carries_them_and_the_host_reads_them(state: Path, tmp_path: Path) -> None:
    fake_runtime.add_container(state, "rtk-c-n1", LABELS)
    answer: dict[str, Any] = json.loads(
        json.dumps(agent.probe("127.0.0.1", str(tmp_path / "rtk-c"), "", "", request(gpus=True)))
    )
    facts = ProbeFacts.from_json("n1", answer)
    assert facts.container == ContainerFacts(
        runtime="docker",
        path=str(tmp_path / "bin" / "docker"),
        version="27.1.0",
        error=None,
        image_present=True,
        gpu_hook=True,
        gpu_hook_via="docker's nvidia runtime",
        state="running",
    )
    assert facts.container.running
    assert ProbeFacts.from_json("n1", facts.to_json()) == facts
    without = agent.probe("127.0.0.1", str(tmp_path / "rtk-c"), "", "")
    assert "container" not in without
    assert ProbeFacts.from_json("n1", json.loads(json.dumps(without))).container is None


def test_a_malformed_container_answer_names_the_node_and_field(state: Path, tmp_path: Path) -> None:
    answer = json.loads(json.dumps(agent.probe("127.0.0.1", str(tmp_path), "", "", request())))
    answer["container"]["image_present"] = "yes"
    with pytest.raises(
        ClusterError, match=r"n1: malformed probe answer .*container\.image_present"
    ):
        ProbeFacts.from_json("n1", answer)
