"""Is a node fit to run rtk's container: the runtime answers, the image is there, GPUs go in.

Graded from the node agent's probe (``toolkit.nodeinfo.probe.ContainerFacts``), which
``rtk up`` runs on every node before it starts anything there: a failed check stops
that node's start, named with the node and how to fix it. Pure: facts in, checks out.
"""

from __future__ import annotations

from toolkit.nodeinfo.probe import ContainerFacts
from toolkit.rundir.preflight import Check

PACKAGES = {"docker": "docker.io", "podman": "podman"}
GPU_HOOK_HINTS = {
    "docker": "install the NVIDIA Container Toolkit and run `nvidia-ctk runtime configure "
    "--runtime=docker`, then restart docker",
    "podman": "install the NVIDIA Container Toolkit and write a CDI spec: `nvidia-ctk cdi "
    "generate --output=/etc/cdi/nvidia.yaml`",
}


def container_checks(node: str, image: str, wants_gpus: bool, facts: ContainerFacts) -> list[Check]:
    """The runtime, the image and (when the container gets GPUs) the GPU hook on ``node``.

    Args:
        node: The node's name.
        image: The image the inventory names.
        wants_gpus: The container gets the node's GPUs (``Container.wants_gpus``).
        facts: What the probe found.

    Returns:
        ``container.runtime``; then, when it answered, ``container.image`` and, with
        GPUs, ``container.gpu_hook``.
    """
    runtime = facts.runtime
    if facts.path is None or facts.error is not None:
        return [_runtime_failed(node, facts)]
    checks = [Check("container.runtime", node, "pass", f"{runtime} {facts.version or ''}".strip())]
    if facts.image_present:
        checks.append(Check("container.image", node, "pass", image))
    else:
        checks.append(
            Check(
                "container.image",
                node,
                "fail",
                f"no image {image} on the node",
                "the image on every node (rtk pulls nothing)",
                f"put it there: `{runtime} load -i FILE.tar` (from `{runtime} save` where "
                f"it was built), or `{runtime} pull {image}` where a registry is reachable",
            )
        )
    if wants_gpus:
        if facts.gpu_hook:
            checks.append(Check("container.gpu_hook", node, "pass", facts.gpu_hook_via or ""))
        else:
            checks.append(
                Check(
                    "container.gpu_hook",
                    node,
                    "fail",
                    f"{runtime} cannot hand GPUs to a container here",
                    "docker: the nvidia runtime or hook; podman: a CDI spec for nvidia.com/gpu",
                    f"{GPU_HOOK_HINTS.get(runtime, 'set up GPUs for the runtime')}; or set "
                    "container.gpus: none for a node whose container needs no GPU",
                )
            )
    return checks


def _runtime_failed(node: str, facts: ContainerFacts) -> Check:
    runtime = facts.runtime
    if facts.path is None:
        measured = f"{runtime} not found on PATH"
        hint = (
            f"install it on the node (Debian: apt install {PACKAGES.get(runtime, runtime)}), "
            "or set container.runtime to the one it has"
        )
    else:
        measured = f"{runtime} does not answer: {facts.error}"
        hint = (
            "start its daemon (systemctl start docker) and let the SSH user reach it "
            "(usermod -aG docker USER)"
            if runtime == "docker"
            else f"run `{runtime} info` on the node as the SSH user to see why"
        )
    return Check("container.runtime", node, "fail", measured, f"{runtime} answers", hint)


def failure_text(checks: list[Check]) -> str | None:
    """The failed checks as one message (``what: how to fix``), or None when all passed."""
    failed = [c for c in checks if c.status == "fail"]
    if not failed:
        return None
    return "; ".join(f"{c.measured}: {c.hint}" for c in failed)
