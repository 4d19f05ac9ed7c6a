"""The workloads a session runs, one module each, each saying how it becomes a Ray job.

``Workload`` (``base``) is what the flows ask of every kind: its checks, whether its
driver may start ahead, what the cluster's state keeps of it, and its ``JobRequest``.
A new kind of workload is one module here that answers those, and nothing in
``toolkit.flows`` changes.
"""

from __future__ import annotations

from toolkit.workloads.base import Workload
from toolkit.workloads.torchrun import TorchrunWorkload
from toolkit.workloads.trainer import TrainWorkload
from toolkit.workloads.user_command import CommandWorkload
from toolkit.workloads.vllm import VllmWorkload

__all__ = ["CommandWorkload", "TorchrunWorkload", "TrainWorkload", "VllmWorkload", "Workload"]
