"""The workflow composed once: bring up, check, run, collect, report, tear down.

The CLI, ``rtk demo`` and ``rtk profile`` all go through a ``Session``; each step
returns a typed result (``outcome``), and what a step would do is a printable plan
first (``--dry-run``).
"""

from __future__ import annotations

from toolkit.flows.job_requests import ExecRequest, job_request
from toolkit.flows.outcome import (
    BringUpOutcome,
    CollectOutcome,
    PreflightFailedError,
    PreflightOutcome,
    PreflightPolicy,
    ReportOutcome,
    WorkloadOutcome,
)
from toolkit.flows.run_plan import RunPlan
from toolkit.flows.session import Session
from toolkit.flows.stand_ins import TransportFactory, transports_from
from toolkit.jobs.request import Driver, JobRequest
from toolkit.workloads import CommandWorkload, TrainWorkload, VllmWorkload, Workload

__all__ = [
    "BringUpOutcome",
    "CollectOutcome",
    "CommandWorkload",
    "Driver",
    "ExecRequest",
    "JobRequest",
    "PreflightFailedError",
    "PreflightOutcome",
    "PreflightPolicy",
    "ReportOutcome",
    "RunPlan",
    "Session",
    "TrainWorkload",
    "TransportFactory",
    "VllmWorkload",
    "Workload",
    "WorkloadOutcome",
    "job_request",
    "transports_from",
]
