"""Ray in a container on a node: the docker/podman command lines, from the plan (pure).

A node with ``container:`` in the inventory runs one long-lived container, named
``rtk-<cluster>-<node>`` and labelled ``rtk.cluster=<cluster>`` and
``rtk.node=<node>``, with the host's network (Ray's pinned ports and NCCL work as on
the host) and the host's IPC (or, with ``shm_size``, a /dev/shm of its own: the
runtimes refuse ``--shm-size`` beside ``--ipc=host``). Inside, ``ray start --block``
runs after rtk's env file, as on a host. Ray's temp dir is mounted at the same path,
so Ray's logs and sockets lie where rtk's node scripts look for them; rtk's own
directory (env file and 0600 token) is mounted read-only over it.

``start_command`` starts the container and waits until Ray says it started; a
container that stops first, or is not ready in time, is shown (its last log lines)
and removed. ``remove_command`` stops and removes only a container that has this
cluster's and node's labels and exactly this name, never another. ``exec_argv``
enters the running container (``rtk exec``, ``rtk shell``).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from toolkit.cluster.containers.node_container import NodeContainer
from toolkit.cluster.containers.slurm_step import RUNTIMES_IN_STEPS
from toolkit.cluster.plan_summary import NAME, Token, cut_hostlist
from toolkit.errors import ClusterError
from toolkit.inventory import Inventory, Node
from toolkit.shell import join, quote

CLUSTER_LABEL = "rtk.cluster"
NODE_LABEL = "rtk.node"
# The runtimes rtk up drives over SSH (and on this machine); apptainer and pyxis are
# for SLURM jobs.
RUNTIMES_OVER_SSH = ("docker", "podman")
# GPUs into the container: docker through the NVIDIA Container Toolkit's hook, podman
# through the CDI spec that nvidia-ctk writes.
GPU_FLAGS = {
    "docker": ("--gpus", "all"),
    "podman": ("--device", "nvidia.com/gpu=all"),
}
READY_POLL_S = 0.5
# The wait for Ray ends this long before the transport's own limit on the command.
READY_MARGIN_S = 2
LOG_LINES_ON_FAILURE = 40


def container_name(cluster: str, node: str) -> str:
    """``rtk-<cluster>-<node>``; a ``:`` of the node's name (not allowed there) as ``_``."""
    return f"rtk-{cluster}-{node.replace(':', '_')}"


@dataclass(frozen=True)
class ContainerPlan(NodeContainer):
    """One node's docker/podman container and the commands that start, enter and remove it.

    The fields of ``NodeContainer`` (``name`` is ``rtk-<cluster>-<node>``, ``node``
    its label ``rtk.node``), and:

    Attributes:
        cluster: The cluster (label ``rtk.cluster``).
    """

    cluster: str

    def labels(self) -> tuple[str, str]:
        """The labels that mark it as this cluster's container of this node."""
        return (f"{CLUSTER_LABEL}={self.cluster}", f"{NODE_LABEL}={self.node}")

    def writes_host_path(self, path: str) -> bool:
        """True when host ``path`` (absolute) is the same path inside, and writable there.

        That is, the deepest mount holding it (the one it is written through) mounts a
        folder above it, or it, at its own path, not read-only.
        """
        if not path.startswith("/"):
            return False
        path = posixpath.normpath(path)
        holding = [
            (posixpath.normpath(m.target), posixpath.normpath(m.source), m.read_only)
            for m in self.mounts()
            if path == posixpath.normpath(m.target)
            or path.startswith(posixpath.normpath(m.target).rstrip("/") + "/")
        ]
        if not holding:
            return False
        target, source, read_only = max(holding, key=lambda m: len(m[0]))
        return source == target and not read_only

    def run_argv(self) -> list[str]:
        """``docker run -d ...`` up to the image: name, labels, host network, mounts."""
        cluster_label, node_label = self.labels()
        argv = [
            self.runtime,
            "run",
            "-d",
            "--name",
            self.name,
            "--label",
            cluster_label,
            "--label",
            node_label,
            "--network=host",
        ]
        if self.spec.shm_size_bytes is None:
            argv.append("--ipc=host")
        else:
            argv.append(f"--shm-size={self.spec.shm_size_bytes}")
        # An init as PID 1 passes docker stop's SIGTERM on to Ray and reaps its orphans.
        argv.append("--init")
        if self.gpus:
            argv += GPU_FLAGS[self.runtime]
        argv += ["-v", f"{self.temp_dir}:{self.temp_dir}"]
        argv += ["-v", f"{self.rtk_dir}:{self.rtk_dir}:ro"]
        for mount in self.spec.mounts:
            argv += ["-v", mount]
        argv += [*self.spec.options, self.image]
        return argv

    def start_command(self, inner: str, ready_text: str, timeout_s: float) -> str:
        """Start the container running ``inner`` (``sh -c``) and wait for ``ready_text``.

        The wait reads the container's log every ``READY_POLL_S``; it fails (exit 1,
        the last log lines on stderr, the container removed) when the container
        stops first or after ``timeout_s`` less ``READY_MARGIN_S``.
        """
        rt, name = quote(self.runtime), quote(self.name)
        wait_s = max(1, int(timeout_s) - READY_MARGIN_S)
        why = quote(
            f"rtk: Ray did not start in container {self.name} (it stopped, or was not "
            f"ready within {wait_s} s); its last log lines:"
        )
        return (
            f"{join([*self.run_argv(), 'sh', '-c', inner])} >/dev/null"
            f" && end=$(($(date +%s) + {wait_s}))"
            f" && until {rt} logs {name} 2>&1 | grep -qF {quote(ready_text)}; do"
            f" if [ \"$({rt} container inspect --format '{{{{.State.Running}}}}' {name}"
            ' 2>/dev/null)" != true ] || [ "$(date +%s)" -ge "$end" ]; then'
            f" echo {why} >&2; {rt} logs --tail {LOG_LINES_ON_FAILURE} {name} >&2;"
            f" {rt} rm -f {name} >/dev/null; exit 1; fi; sleep {READY_POLL_S:g}; done"
        )

    def find_command(self) -> str:
        """``docker ps`` of this container: its name, and both labels (ids, one a line)."""
        cluster_label, node_label = self.labels()
        return join(
            [
                self.runtime,
                "ps",
                "-aq",
                "--filter",
                f"label={cluster_label}",
                "--filter",
                f"label={node_label}",
                "--filter",
                f"name=^{self.name}$",
            ]
        )

    def remove_command(self, grace_s: float) -> str:
        """Stop (SIGTERM, SIGKILL after ``grace_s``) and remove this container, if there.

        Prints the id of each container removed; fails when the runtime does not answer.
        A node without the runtime has no container to remove: that is no failure.
        """
        rt = quote(self.runtime)
        return (
            f"command -v {rt} >/dev/null || exit 0; "
            f'ids=$({self.find_command()}) && if [ -n "$ids" ]; then'
            f" {rt} stop -t {int(grace_s)} $ids >/dev/null 2>&1; {rt} rm -f $ids; fi"
        )

    def exec_argv(self, argv: Sequence[str], tty: bool = False) -> list[str]:
        """``docker exec -i [-t] NAME ARGV``: ``argv`` inside the running container."""
        return [self.runtime, "exec", "-i", *(["-t"] if tty else []), self.name, *argv]

    def exec_command(self, command: str) -> str:
        """Shell text that runs shell text ``command`` inside the container (``sh -c``)."""
        return join(self.exec_argv(["sh", "-c", command]))

    def probe_request(self) -> str:
        """What the node agent's probe checks of the runtime, as its JSON argument."""
        return json.dumps(
            {
                "runtime": self.runtime,
                "image": self.image,
                "name": self.name,
                "labels": list(self.labels()),
                "gpus": self.gpus,
            },
            sort_keys=True,
        )

    def describe(self) -> str:
        """One line for the plan: runtime, image, name and how it shares the host."""
        shm = self.spec.shm_size_bytes
        ipc = "host IPC" if shm is None else f"own /dev/shm of {_size(shm)}"
        gpus = ", the node's GPUs" if self.gpus else ""
        return (
            f"{self.runtime} container {self.name} (label {CLUSTER_LABEL}={self.cluster}) "
            f"of {self.image}: host network, {ipc}{gpus}"
        )


def name_tokens(container: ContainerPlan) -> tuple[Token, ...]:
    """The node's name in its container's commands, to mask (``plan_summary``).

    It stands alone (``rtk.node=NODE``) and joined on in the container's name
    (``rtk-<cluster>-NODE``), where it is masked after that prefix.
    """
    tokens = [Token(NAME, container.node)]
    if container.name.endswith("-" + container.node):
        tokens.append(Token(NAME, container.node, prefix=container.name[: -len(container.node)]))
    return tuple(tokens)


def _size(n: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:,} bytes"


def container_plan(
    inventory: Inventory, node: Node, temp_dir: str, rtk_dir: str
) -> ContainerPlan | None:
    """The node's container, when it has one that ``rtk up`` can start (docker, podman)."""
    spec = node.container
    if spec is None or spec.runtime not in RUNTIMES_OVER_SSH:
        return None
    return ContainerPlan(
        spec=spec,
        name=container_name(inventory.name, node.name),
        node=node.name,
        gpus=spec.wants_gpus(node.gpus),
        temp_dir=temp_dir,
        rtk_dir=rtk_dir,
        cluster=inventory.name,
    )


def check_startable(inventory: Inventory, nodes: Sequence[Node]) -> None:
    """Refuse containers that ``inventory``'s transport cannot start on ``nodes``.

    Over SSH (and on this machine) rtk runs docker and podman itself; in a SLURM
    job (transport srun) Ray's step runs in pyxis or apptainer, which size no
    /dev/shm of their own (they share the host's).

    Raises:
        ClusterError: A node's runtime does not run under this transport, or asks for
            what it cannot do; every such node named.
    """
    in_steps = inventory.transport == "srun"
    allowed = RUNTIMES_IN_STEPS if in_steps else RUNTIMES_OVER_SSH
    refused: dict[str, list[str]] = {}
    for node in nodes:
        spec = node.container
        if spec is None:
            continue
        if spec.runtime not in allowed:
            refused.setdefault(spec.runtime, []).append(node.name)
        elif in_steps and spec.shm_size_bytes is not None:
            refused.setdefault("shm_size", []).append(node.name)
    if not refused:
        return
    lines = [f"{inventory.source}: rtk up over {inventory.transport} cannot start these nodes:"]
    for runtime, names in refused.items():
        lines.append(f"  {cut_hostlist(names)}: {_refusal(runtime, in_steps)}")
    raise ClusterError("\n".join(lines))


def _refusal(runtime: str, in_steps: bool) -> str:
    """Why ``runtime`` (or ``shm_size``) cannot run here, and what to do instead."""
    if runtime == "shm_size":
        return (
            "container.shm_size: pyxis and apptainer share the host's /dev/shm; "
            "remove shm_size (size /dev/shm on the nodes)"
        )
    if in_steps:
        return (
            f"container.runtime {runtime}: a SLURM job runs Ray's step in pyxis or "
            "apptainer; set one of them for --slurm, or use rtk up over SSH"
        )
    why = (
        "pyxis exists only inside srun (a SLURM job step)"
        if runtime == "pyxis"
        else "apptainer containers are started by SLURM jobs"
    )
    return f"container.runtime {runtime}: {why}; use rtk sbatch, or docker or podman for rtk up"


def check_path_mounted(containers: Sequence[ContainerPlan], path: str, what: str) -> None:
    """Refuse a host ``path`` that Ray's processes in ``containers`` would not see.

    A path written from inside a container (the run directory, by the trainer's
    workers) that is not mounted there at its own path lands in the container's own
    filesystem: the host never sees it, and ``rtk down`` removes it with the container.
    A URI (``s3://...``) is not a path and passes.

    Raises:
        ClusterError: ``path`` is relative, starts with ``~`` (``/root`` inside the
            container), or is not under a read-write mount of its own path in every
            container.
    """
    if "://" in path or not containers:
        return
    blind = [c.node for c in containers if not c.writes_host_path(path)]
    if not blind:
        return
    # Ray's temp dir and rtk's own are removed by rtk down: no place for results.
    mounted = sorted(
        {
            m.target
            for c in containers
            for m in c.mounts()[2:]
            if m.source == m.target and not m.read_only
        }
    )
    why = (
        f"{what} {path} is not an absolute path: inside a container ~ is the image's home"
        if not path.startswith("/")
        else f"{what} {path} is not mounted at its own path (read-write) in the containers of "
        f"{cut_hostlist(blind)}"
    )
    folder = posixpath.dirname(posixpath.normpath(path)) if path.startswith("/") else "/srv/runs"
    raise ClusterError(
        f"{why}, so what Ray's processes write there would stay inside the container and "
        f"be lost at rtk down. Mount a folder above it at its own path (container.mounts: "
        f"- {folder}:{folder}), or pick a path under one mounted already "
        f"({', '.join(mounted) or 'none'})."
    )
