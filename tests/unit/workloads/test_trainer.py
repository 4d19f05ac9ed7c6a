"""The trainer as a Ray job: its request, its checks, the run kept in the cluster's state."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.cluster.plan import build_plan
from toolkit.errors import RtkError
from toolkit.flows import job_request
from toolkit.inventory import default_inventory
from toolkit.stall.flight.collectives import FLIGHT_RECORDER_ENTRIES
from toolkit.state.store import StateStore
from toolkit.train.config import TrainConfig
from toolkit.workloads import TrainWorkload


def test_the_trainer_becomes_a_train_job_named_by_its_run() -> None:
    plan = build_plan(default_inventory())
    request = job_request(plan, TrainWorkload(TrainConfig(run_dir="/r/t"), "t"), now_s=7)
    assert (request.kind, request.submission_id, request.run_dir) == (
        "train",
        "rtk-train-t-7",
        "/r/t",
    )
    assert "toolkit.train.job" in request.entrypoint
    assert request.dashboard_url == plan.dashboard_url
    # Every rank records its collectives (PyTorch's Flight Recorder) for the watchdog.
    env_vars = request.runtime_env["env_vars"]
    assert env_vars["TORCH_FR_BUFFER_SIZE"] == str(FLIGHT_RECORDER_ENTRIES)


def test_only_the_trainer_s_driver_starts_ahead_and_its_config_is_checked() -> None:
    workload = TrainWorkload(TrainConfig(run_dir="/r/t", strategy="zero9"), "t")
    assert workload.starts_ahead
    with pytest.raises(RtkError, match="--strategy 'zero9'"):
        workload.check()


def test_the_run_is_remembered_last_for_resume(tmp_path: Path) -> None:
    store = StateStore("c", tmp_path)
    TrainWorkload(TrainConfig(run_dir="/r/a"), "a").remember(store)
    TrainWorkload(TrainConfig(run_dir="/r/b"), "b").remember(store)
    state = store.load()
    assert state is not None
    assert [(r.run_id, r.run_dir) for r in state.runs][-1] == ("b", "/r/b")
