"""What every plan of a node's container holds, whichever runtime starts it (pure).

``ContainerPlan`` (docker, podman: ``rtk up`` over SSH) and ``StepContainerPlan``
(pyxis, apptainer: Ray's srun step) share the node's container spec, its name, the
GPUs and the two directories rtk mounts, and read the inventory's mounts the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from toolkit.inventory import Container


class Mount(NamedTuple):
    """One bind mount: host path, path inside, and its flags as written (``ro``, ``z``)."""

    source: str
    target: str
    flags: tuple[str, ...] = ()

    @property
    def read_only(self) -> bool:
        """True when it is mounted read-only."""
        return "ro" in self.flags


@dataclass(frozen=True)
class NodeContainer:
    """One node's container: what it runs and what rtk mounts in it.

    Attributes:
        spec: The inventory's container for the node.
        name: The container's name (for pyxis, ``--container-name``).
        node: The node.
        gpus: True when the container gets the node's GPUs.
        temp_dir: Ray's temp dir, mounted at the same path.
        rtk_dir: rtk's files (env file, token), mounted read-only.
    """

    spec: Container
    name: str
    node: str
    gpus: bool
    temp_dir: str
    rtk_dir: str

    @property
    def runtime(self) -> str:
        """Docker or podman (over SSH), pyxis or apptainer (in a SLURM job step)."""
        return self.spec.runtime

    @property
    def image(self) -> str:
        """The image it runs."""
        return self.spec.image

    def mounts(self) -> tuple[Mount, ...]:
        """Every bind mount: rtk's two (Ray's temp dir, rtk's read-only), the inventory's.

        An inventory mount is ``SOURCE:TARGET[:FLAG,FLAG...]``.
        """
        mounts = [Mount(self.temp_dir, self.temp_dir), Mount(self.rtk_dir, self.rtk_dir, ("ro",))]
        for mount in self.spec.mounts:
            source, target, *rest = mount.split(":")
            mounts.append(Mount(source, target, tuple(rest[0].split(",")) if rest else ()))
        return tuple(mounts)
