"""A node's container checks, graded from the probe's facts: each failure says how to fix."""

from __future__ import annotations

import pytest

from toolkit.nodeinfo.probe import ContainerFacts
from toolkit.preflight.container_checks import container_checks, failure_text

READY = ContainerFacts(
    runtime="podman",
    path="/usr/bin/podman",
    version="4.3.1",
    image_present=True,
    gpu_hook=True,
    gpu_hook_via="/etc/cdi/nvidia.yaml",
)


def statuses(facts: ContainerFacts, wants_gpus: bool = True) -> dict[str, str]:
    return {c.name: c.status for c in container_checks("n7", "rtk-ray:1", wants_gpus, facts)}


def test_a_ready_node_passes_every_check() -> None:
    checks = container_checks("n7", "rtk-ray:1", True, READY)
    assert [(c.name, c.status, c.measured) for c in checks] == [
        ("container.runtime", "pass", "podman 4.3.1"),
        ("container.image", "pass", "rtk-ray:1"),
        ("container.gpu_hook", "pass", "/etc/cdi/nvidia.yaml"),
    ]
    assert all(c.scope == "n7" for c in checks)
    assert failure_text(checks) is None


def test_no_gpu_check_for_a_container_without_gpus() -> None:
    assert statuses(READY, wants_gpus=False) == {
        "container.runtime": "pass",
        "container.image": "pass",
    }


@pytest.mark.parametrize(
    ("facts", "measured", "hint"),
    [
        (
            ContainerFacts("docker", error="docker not found on PATH"),
            "docker not found on PATH",
            "apt install docker.io",
        ),
        (
            ContainerFacts("docker", path="/usr/bin/docker", error="Cannot connect to the Docker"),
            "docker does not answer: Cannot connect to the Docker",
            "usermod -aG docker USER",
        ),
        (
            ContainerFacts("podman", path="/usr/bin/podman", error="cannot set up namespace"),
            "podman does not answer: cannot set up namespace",
            "run `podman info` on the node",
        ),
    ],
)
def test_a_runtime_that_does_not_answer_is_the_one_failure(
    facts: ContainerFacts, measured: str, hint: str
) -> None:
    (check,) = container_checks("n7", "rtk-ray:1", True, facts)
    assert (check.name, check.status, check.measured) == ("container.runtime", "fail", measured)
    assert hint in check.hint


def test_a_missing_image_says_how_to_bring_it() -> None:
    facts = ContainerFacts(
        "docker", "/usr/bin/docker", "27.1.0", image_present=False, gpu_hook=True
    )
    checks = container_checks("n7", "rtk-ray:1", True, facts)
    assert statuses(facts) == {
        "container.runtime": "pass",
        "container.image": "fail",
        "container.gpu_hook": "pass",
    }
    text = failure_text(checks)
    assert text == (
        "no image rtk-ray:1 on the node: put it there: `docker load -i FILE.tar` (from "
        "`docker save` where it was built), or `docker pull rtk-ray:1` where a registry is "
        "reachable"
    )


@pytest.mark.parametrize(
    ("runtime", "hint"),
    [
        ("docker", "nvidia-ctk runtime configure --runtime=docker"),
        ("podman", "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"),
    ],
)
def test_a_missing_gpu_hook_names_the_runtimes_fix(runtime: str, hint: str) -> None:
    facts = ContainerFacts(runtime, f"/usr/bin/{runtime}", "1", image_present=True, gpu_hook=False)
    checks = container_checks("n7", "rtk-ray:1", True, facts)
    failed = [c for c in checks if c.status == "fail"]
    assert [c.name for c in failed] == ["container.gpu_hook"]
    assert hint in failed[0].hint
    assert "container.gpus: none" in failed[0].hint
