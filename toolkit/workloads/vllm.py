"""vLLM's benchmark (``toolkit.profile.vllm_bench``) under telemetry, as a Ray job."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit.cluster.plan import ClusterPlan
from toolkit.jobs.request import JobRequest
from toolkit.telemetry.options import TelemetryOptions
from toolkit.workloads.base import Unremembered
from toolkit.workloads.user_command import CommandWorkload, recorded_request

VLLM_BENCH_MODULE = "toolkit.profile.vllm_bench"


@dataclass(frozen=True)
class VllmWorkload(Unremembered):
    """The vLLM benchmark with ``settings``, under telemetry (``rtk profile``)."""

    settings: Mapping[str, Any]
    run_dir: str
    telemetry: TelemetryOptions = field(default_factory=TelemetryOptions)
    working_dir: str = "."
    env: Mapping[str, str] = field(default_factory=dict)

    def check(self) -> None:
        """Its telemetry options."""
        self.telemetry.check()

    def job_request(self, plan: ClusterPlan, stamp: int, ship_code: bool) -> JobRequest:
        """The benchmark's module on the head, recorded as any command is."""
        argv = [plan.head.node.python, "-m", VLLM_BENCH_MODULE, json.dumps(dict(self.settings))]
        command = CommandWorkload(
            tuple(argv), self.working_dir, self.env, self.run_dir, self.telemetry
        )
        return recorded_request(plan, command, "vllm", stamp, ship_code)
