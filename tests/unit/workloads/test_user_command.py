"""Any command as a Ray job: plain (``rtk launch``) or under telemetry (``rtk telemetry record``)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from toolkit.cluster.plan import build_plan
from toolkit.errors import RtkError
from toolkit.flows import job_request
from toolkit.inventory import default_inventory
from toolkit.state.store import StateStore
from toolkit.telemetry.options import TelemetryOptions
from toolkit.workloads import CommandWorkload


def test_a_plain_command_is_the_entrypoint_with_its_env() -> None:
    plan = build_plan(default_inventory())
    command = CommandWorkload(("true", "a b"), env={"RTK_AXIS_X": "1"}, run_dir="/r/c")
    plain = job_request(plan, command, now_s=7)
    assert plain.kind == "command" and plain.runtime_env["env_vars"] == {"RTK_AXIS_X": "1"}
    assert shlex.split(plain.entrypoint) == ["true", "a b"]
    assert plain.submission_id == f"rtk-launch-{plan.inventory.name}-7"
    assert "entrypoint: true 'a b'" in plain.render()


def test_with_telemetry_the_command_runs_inside_the_record_job() -> None:
    plan = build_plan(default_inventory())
    telemetry = TelemetryOptions(baseline_s=5)
    recorded = job_request(plan, CommandWorkload(("true",), run_dir="/r/c", telemetry=telemetry), 7)
    argv = shlex.split(recorded.entrypoint)
    assert "toolkit.telemetry.record_job" in argv and argv[-1] == "true"
    assert recorded.runtime_env["env_vars"]["TORCH_FR_BUFFER_SIZE"] == "500"
    # The user's own value wins over rtk's.
    mine = CommandWorkload(
        ("true",), env={"TORCH_FR_BUFFER_SIZE": "64"}, run_dir="/r", telemetry=telemetry
    )
    assert job_request(plan, mine, 7).runtime_env["env_vars"]["TORCH_FR_BUFFER_SIZE"] == "64"
    assert (recorded.kind, recorded.submission_id, recorded.run_dir) == (
        "record",
        "rtk-record-c-7",
        "/r/c",
    )


def test_bad_telemetry_options_are_refused_and_nothing_is_remembered(tmp_path: Path) -> None:
    workload = CommandWorkload(("true",), run_dir="/r/c", telemetry=TelemetryOptions(rate_hz=0))
    with pytest.raises(RtkError, match="--telemetry-rate-hz"):
        workload.check()
    CommandWorkload(("true",)).check()  # no telemetry: nothing to check
    store = StateStore("c", tmp_path)
    workload.remember(store)
    assert not workload.starts_ahead and store.load() is None
