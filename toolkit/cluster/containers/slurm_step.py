"""Ray in a container of a SLURM job step (pyxis, apptainer): its command lines (pure).

Under ``--slurm`` every node's ``ray start --block`` is one srun step (see
``toolkit.transport.srun``); with ``container.runtime`` pyxis or apptainer that step
runs in the node's container, and SLURM ends it, container included, on ``scancel``
or at the time limit, as it ends a step on the host.

- pyxis (a SPANK plugin of srun, enroot underneath): the step itself carries
  ``--container-image``, ``--container-mounts`` and ``--container-name``; its
  command runs inside. Pyxis keeps the host's network (it makes no network
  namespace), so Ray's ports, the job's block of them, and NCCL work as on the host.
  The name is per job (the cluster's name holds the job id): pyxis keeps a named
  container's filesystem for the job's later steps, which give the same
  ``--container-name`` to use it without importing the image again, and removes it
  when the job ends.
- apptainer: the step runs ``apptainer exec [--nv] --bind ... IMAGE`` around Ray.
  Apptainer shares the host's network and IPC (and /dev/shm) by default, so nothing
  is asked for them.

Both mount Ray's temp dir at the same path (Ray's logs and sockets lie where rtk's
node scripts look for them) and rtk's own directory (env file, 0600 token)
read-only. The inventory's mounts follow; their ``z``/``Z`` (SELinux relabelling, a
docker/podman matter) are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.cluster.containers.node_container import Mount, NodeContainer
from toolkit.inventory import Container, Inventory, Node
from toolkit.shell import join, with_env_file

# The runtimes a SLURM job step starts; docker and podman are rtk up over SSH's.
RUNTIMES_IN_STEPS = ("pyxis", "apptainer")
RELABEL_FLAGS = ("z", "Z")


def step_container_name(cluster: str) -> str:
    """``rtk-<cluster>``: the cluster's name holds the job id under ``--slurm``."""
    return f"rtk-{cluster}"


@dataclass(frozen=True)
class StepContainerPlan(NodeContainer):
    """One node's container of the srun step that runs its Ray (pyxis or apptainer).

    The fields of ``NodeContainer``; ``name`` is pyxis's ``--container-name`` (per job).
    """

    def mounts(self) -> tuple[Mount, ...]:
        """Every bind mount, less the flags only docker and podman know (``z``, ``Z``)."""
        return tuple(
            m._replace(flags=tuple(f for f in m.flags if f not in RELABEL_FLAGS))
            for m in super().mounts()
        )

    def step_options(self) -> tuple[str, ...]:
        """The step's srun options (pyxis); none for apptainer.

        Pyxis separates a mount's flags with ``+`` (``ro+rprivate``). The GPUs SLURM
        gives the step go in through enroot's nvidia hook: no option asks for them.
        """
        if self.runtime != "pyxis":
            return ()
        mounts = ",".join(
            ":".join([source, destination, *(["+".join(flags)] if flags else [])])
            for source, destination, flags in self.mounts()
        )
        return (
            f"--container-image={self.image}",
            f"--container-mounts={mounts}",
            f"--container-name={self.name}",
            *self.spec.options,
        )

    def wrap(self, env_file: str, line: str) -> str:
        """The step's command for shell text ``line`` (``exec ray start ... --block``).

        With pyxis srun already put the step in the container: ``line`` as it is.
        With apptainer, ``exec apptainer exec ... IMAGE sh -c`` around it, the env file
        read again inside (apptainer keeps the host's environment, but the image's
        PATH).
        """
        if self.runtime != "apptainer":
            return line
        inner = with_env_file(env_file, line)
        return "exec " + join([*self.apptainer_argv(), "sh", "-c", inner])

    def apptainer_argv(self) -> list[str]:
        """``apptainer exec [--nv] --bind SRC:DST[:ro],... [OPTIONS] IMAGE``."""
        binds = ",".join(
            ":".join([source, destination, *([",".join(flags)] if flags else [])])
            for source, destination, flags in self.mounts()
        )
        argv = ["apptainer", "exec", *(["--nv"] if self.gpus else []), "--bind", binds]
        return [*argv, *self.spec.options, self.image]

    def describe(self) -> str:
        """One line for the plan: runtime, image, name and how it shares the host."""
        if self.runtime == "pyxis":
            gpus = ", the step's GPUs (enroot's hook)" if self.gpus else ""
            return (
                f"pyxis container {self.name} of {self.image} in Ray's srun step: "
                f"host network{gpus}"
            )
        gpus = ", the node's GPUs (--nv)" if self.gpus else ""
        return f"apptainer container of {self.image} in Ray's srun step: host network and IPC{gpus}"


def step_container_plan(
    inventory: Inventory, node: Node, temp_dir: str, rtk_dir: str
) -> StepContainerPlan | None:
    """The node's container when its Ray step runs in one (pyxis, apptainer over srun)."""
    spec = node.container
    if spec is None or spec.runtime not in RUNTIMES_IN_STEPS or inventory.transport != "srun":
        return None
    return StepContainerPlan(
        spec=spec,
        name=step_container_name(inventory.name),
        node=node.name,
        gpus=spec.wants_gpus(node.gpus),
        temp_dir=temp_dir,
        rtk_dir=rtk_dir,
    )


def batch_script_note(inventory: Inventory) -> list[str]:
    """Comment lines for a batch script: how each node's Ray step runs in its container.

    One paragraph per distinct container of the inventory's nodes; the job's values
    (``$SLURM_JOB_ID`` in the name and Ray's temp dir) stay as the job will see them.
    ``rtk up --slurm --dry-run`` in the job shows each node's whole command.
    """
    temp_dir = "/tmp/rtk-${SLURM_JOB_ID}"
    name = step_container_name(inventory.name + "-${SLURM_JOB_ID}")
    lines: list[str] = []
    seen: list[tuple[Container, bool]] = []
    for node in inventory.nodes:
        spec = node.container
        if spec is None or spec.runtime not in RUNTIMES_IN_STEPS:
            continue
        gpus = spec.wants_gpus(node.gpus)
        if (spec, gpus) in seen:
            continue
        seen.append((spec, gpus))
        step = StepContainerPlan(
            spec=spec,
            name=name,
            node=node.name,
            gpus=gpus,
            temp_dir=temp_dir,
            rtk_dir=temp_dir + "/rtk",
        )
        lines.append(f"# Ray in containers: {step.describe()}.")
        if spec.runtime == "pyxis":
            lines.append(
                "# `rtk up --slurm` runs each node's `ray start --block` as an srun step with"
            )
            lines += [f"#   {option}" for option in step.step_options()]
        else:
            lines.append(
                "# `rtk up --slurm` runs each node's `ray start --block` in an srun step as"
            )
            lines.append(f"#   {' '.join(step.apptainer_argv())} \\")
            lines.append("#     sh -c '. ENV_FILE && exec ray start ... --block'")
    if lines:
        lines.append(
            "# (`rtk up --slurm --dry-run` inside the job prints every node's whole command.)"
        )
    return lines
