"""``rtk torchrun`` as a Ray job: the fan-out driver, recorded, and what each node runs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from toolkit.cluster.plan import build_plan
from toolkit.errors import RtkError
from toolkit.flows import job_request
from toolkit.inventory import Inventory, parse_inventory
from toolkit.telemetry.options import TelemetryOptions
from toolkit.torchrun.spec import TorchrunSpec
from toolkit.workloads import TorchrunWorkload
from toolkit.workloads.torchrun import torchrun_lines


def _inventory() -> Inventory:
    nodes = "".join(
        f"  - {{host: n{i}, address: 10.0.0.{i}, gpus: {8 if i < 3 else 4}}}\n" for i in range(1, 5)
    )
    return parse_inventory(f"cluster: tr\nnodes:\n{nodes}", "test", Path("."))


def test_the_fanout_driver_is_recorded_and_named_as_torchrun() -> None:
    plan = build_plan(_inventory())
    spec = TorchrunSpec("train.py", ("--lr", "1"), env={"A": "1"}, run_id="r1")
    request = job_request(plan, TorchrunWorkload(spec, "/r/t"), now_s=7)
    argv = shlex.split(request.entrypoint)
    assert "toolkit.telemetry.record_job" in argv
    fanout = argv[argv.index("toolkit.torchrun.fanout") + 1]
    assert json.loads(fanout)["script"] == "train.py"
    assert (request.kind, request.submission_id) == ("torchrun", "rtk-torchrun-t-7")
    assert request.runtime_env["env_vars"]["RAY_DEDUP_LOGS"] == "0"
    assert request.notes == tuple(torchrun_lines(plan, spec))


def test_nodes_alike_share_one_line_and_the_env_is_shown() -> None:
    plan = build_plan(_inventory())
    lines = torchrun_lines(plan, TorchrunSpec("train.py", env={"A": "1"}))
    assert lines[0] == "torchrun on every node, started together by the job:"
    # The host (the rendezvous server), the other 8-GPU node, the two 4-GPU nodes.
    assert [line.split(":")[0].strip() for line in lines[1:-1]] == [
        "n1 (1)",
        "n2 (1)",
        "n[3-4] (2)",
    ]
    assert "--rdzv-conf=is_host=1" in lines[1] and "--nproc-per-node=4" in lines[3]
    assert lines[-1] == "  with A=1"


def test_its_telemetry_is_checked() -> None:
    workload = TorchrunWorkload(TorchrunSpec("t.py"), "/r", telemetry=TelemetryOptions(rate_hz=99))
    with pytest.raises(RtkError, match="--telemetry-rate-hz"):
        workload.check()
    assert not workload.starts_ahead
