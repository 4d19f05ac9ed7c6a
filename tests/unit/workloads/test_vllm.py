"""vLLM's benchmark as a Ray job: the benchmark's module, recorded as any command is."""

from __future__ import annotations

import json
import shlex

import pytest

from toolkit.cluster.plan import build_plan
from toolkit.errors import RtkError
from toolkit.flows import job_request
from toolkit.inventory import default_inventory
from toolkit.telemetry.options import TelemetryOptions
from toolkit.workloads import VllmWorkload


def test_the_benchmark_runs_under_the_record_job_with_its_settings() -> None:
    plan = build_plan(default_inventory())
    telemetry = TelemetryOptions(baseline_s=5)
    vllm = job_request(plan, VllmWorkload({"model": "m"}, "/r/v", telemetry), now_s=7)
    argv = shlex.split(vllm.entrypoint)
    inner = argv[argv.index("toolkit.telemetry.record_job") + 2 :]
    assert inner[1:3] == ["-m", "toolkit.profile.vllm_bench"]
    assert json.loads(inner[3]) == {"model": "m"}
    assert (vllm.kind, vllm.submission_id) == ("vllm", "rtk-record-v-7")


def test_its_telemetry_is_checked() -> None:
    with pytest.raises(RtkError, match="--baseline-s"):
        VllmWorkload({}, "/r/v", TelemetryOptions(baseline_s=-1)).check()
