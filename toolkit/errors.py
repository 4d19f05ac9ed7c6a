"""The one exception hierarchy of rtk.

Library code raises these (converting third-party errors where they happen, with
``raise ... from e``); the CLI turns them into one clear message and ``exit_code``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class RtkError(Exception):
    """Base of every expected rtk failure."""

    exit_code = 1


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input file.

    Attributes:
        source: The file (or ``<embedded default>``) the problem is in.
        line: 1-based line of the offending key or value, when known.
        path: Key path such as ``nodes[2].gpus``; empty for the whole file.
        message: What is wrong and what is allowed.
    """

    source: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class FileProblemsError(RtkError):
    """An input file is missing, unreadable or invalid: every problem, one per line."""

    exit_code = 3

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class InventoryError(FileProblemsError):
    """The inventory file is missing, unreadable or invalid."""


class TransportError(RtkError):
    """A node could not be reached or a command could not be run on it."""

    exit_code = 4


class ClusterError(RtkError):
    """Bring-up, status or teardown failed on one or more nodes."""

    exit_code = 4


class WaitTimeoutError(ClusterError):
    """Nodes did not become alive with the expected resources in time."""

    exit_code = 5


class NetEnvError(ClusterError):
    """A node's network cannot serve the NCCL/Gloo profile asked for (e.g. ib, no IB port)."""

    exit_code = 4


class JobError(RtkError):
    """A Ray job is unknown to the cluster, or did not end when asked to stop."""


class TorchrunError(JobError):
    """``rtk torchrun`` cannot start: a node lacks the script, the port is taken, too many ranks."""


class StateError(RtkError):
    """rtk's record of a cluster is missing or does not match the inventory."""

    exit_code = 6


class PreflightError(RtkError):
    """A preflight check failed: the nodes are not fit for a run as they are."""

    exit_code = 1


class TelemetryError(RtkError):
    """The telemetry endpoint cannot be served as asked (no address, unreadable token)."""

    exit_code = 4


class ReportError(RtkError):
    """The run directory lacks what a report needs (telemetry, samples) or cannot be read."""


class SlurmError(RtkError):
    """Not inside an allocation, or sbatch/srun/scontrol is missing or refused a request."""

    exit_code = 8


class GpuControlError(RtkError):
    """A GPU power limit or clock lock was refused, failed, or could not be put back."""

    exit_code = 9


class ExperimentError(FileProblemsError):
    """The experiment file of rtk profile is missing, unreadable or invalid."""


class RunDirError(RtkError):
    """A run directory's record cannot be read: unreadable, not JSON, or a field is wrong."""


class HardwareError(FileProblemsError):
    """The hardware expectations file is missing or invalid, or names no such model."""


class SandboxError(RtkError):
    """A sandbox could not be created, reached or removed on this machine."""

    exit_code = 7
