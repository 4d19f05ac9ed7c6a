"""The one interface to a cluster's GPU limits, whichever way rtk reaches the nodes.

Every node keeps what to put back in one restore file (``node/gpu_control.py``, the
one owner of its format, at ``<cluster dir>/rtk/gpu-restore.json``). Two paths set and
put back limits through it:

- over SSH, from this machine (``limits_over_ssh.SshGpuLimits``): ``rtk profile``'s
  runs and ``--restore``, and ``rtk up``'s put-back of what an earlier run left;
- a Ray task pinned to each node, from a job's driver (``power.ask.RayPowerNodes``):
  the power policy while the run goes.

Both answer a put-back as ``GpuRestore`` per node, worded by ``restored_lines``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class GpuRestore:
    """What putting back one node's GPU settings did.

    Attributes:
        node: The node's inventory name.
        done: One line per GPU setting put back.
        failed: What could not be put back, in one line (the restore file stays).
        left: Why the file was left as it is (another run, or ``rtk profile``, wrote
            it): not a failure.
    """

    node: str
    done: tuple[str, ...] = ()
    failed: str | None = None
    left: str | None = None

    @property
    def nothing_to_do(self) -> bool:
        """True when the node had nothing to put back (no restore file)."""
        return not (self.done or self.failed or self.left)

    @property
    def lines(self) -> tuple[str, ...]:
        """Everything it did, one line each."""
        return (*self.done, *(line for line in (self.left, self.failed) if line))


def restored_lines(node: str, gpus: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """One line per GPU put back: ``node: put back the power limit of GPU <uuid>``.

    ``gpus``: GPU UUID -> the settings put back there (``power_limit``, ``gpu_clocks``...),
    as ``gpu_control.restore`` answers.
    """
    return tuple(
        f"{node}: put back the {', '.join(kinds).replace('_', ' ')} of GPU {uuid}"
        for uuid, kinds in gpus.items()
        if kinds
    )


class GpuLimits(Protocol):
    """A path to the GPU limits of a set of nodes."""

    def restore(self) -> dict[str, GpuRestore]:
        """Put back what the nodes' restore files name; node -> what was done.

        A node that cannot be reached or fails is a ``GpuRestore`` with ``failed``;
        the others are put back all the same.
        """
        ...
