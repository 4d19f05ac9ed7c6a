"""The training driver's workload: Ray Train's result as the job's exit status, and a
stop from outside (a stall) that ends the wait for a fit that cannot end itself."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from toolkit.train.config import TrainConfig
from toolkit.train.fitting import TrainRun
from toolkit.train.stop import STOPPED_EXIT
from toolkit.train.workers import WorkerLayout

LAYOUT = WorkerLayout(1, {"CPU": 1.0}, False, "SPREAD")


@dataclass
class Result:
    metrics: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None


class Trainer:
    def __init__(self, result: Result, block: threading.Event | None = None) -> None:
        self.result, self.block = result, block

    def fit(self) -> Result:
        if self.block is not None:
            self.block.wait(60)
        return self.result


def run(tmp_path: Path, result: Result, **config: Any) -> tuple[int, list[str]]:
    said: list[str] = []
    cfg = TrainConfig(run_dir=str(tmp_path), max_steps=10, **config)
    return TrainRun(cfg, LAYOUT, said.append, Trainer(result)).run(), said


def test_the_last_step_is_success_with_its_loss(tmp_path: Path) -> None:
    assert run(tmp_path, Result({"step": 10, "loss": 1.5})) == (
        0,
        ["finished at step 10 (loss 1.5)"],
    )


def test_a_resumed_run_that_reported_no_last_checkpoint_still_finished(tmp_path: Path) -> None:
    assert run(tmp_path, Result({"step": 4})) == (0, ["finished 10 steps (metrics.jsonl)"])


def test_an_error_is_a_failure_that_says_what(tmp_path: Path) -> None:
    code, said = run(tmp_path, Result(error=RuntimeError("worker died")))
    assert (code, said) == (1, ["ended early: worker died"])


def test_a_stop_asked_for_before_the_last_step_is_its_own_status(tmp_path: Path) -> None:
    said: list[str] = []
    cfg = TrainConfig(run_dir=str(tmp_path), max_steps=10, checkpoint_on_stop=True)
    train = TrainRun(cfg, LAYOUT, said.append, Trainer(Result({"step": 6})))
    assert train.stop_request is not None
    train.stop_request.request("SIGINT")
    assert train.run() == STOPPED_EXIT
    assert said == ["stopped as asked at step 6"]


def test_a_stop_from_outside_ends_the_wait_for_a_fit_that_cannot_end(tmp_path: Path) -> None:
    block = threading.Event()  # a stalled fit: never set here
    cfg = TrainConfig(run_dir=str(tmp_path), max_steps=10)
    train = TrainRun(cfg, LAYOUT, print, Trainer(Result(), block))
    threading.Timer(0.2, train.stop).start()
    assert train.run() == 1
    block.set()


def test_a_stop_request_left_by_an_earlier_allocation_is_cleared(tmp_path: Path) -> None:
    cfg = TrainConfig(run_dir=str(tmp_path), max_steps=10, checkpoint_on_stop=True)
    first = TrainRun(cfg, LAYOUT, print, Trainer(Result()))
    assert first.stop_request is not None
    first.stop_request.request("USR1")
    assert first.stop_request.run_dir.stop_request.exists()
    TrainRun(cfg, LAYOUT, print, Trainer(Result()))
    assert not first.stop_request.run_dir.stop_request.exists()


@pytest.mark.parametrize("checkpoint_on_stop", [False, True])
def test_what_fit_raised_is_raised(tmp_path: Path, checkpoint_on_stop: bool) -> None:
    class Raising:
        def fit(self) -> Result:
            raise ValueError("bad config")

    cfg = TrainConfig(run_dir=str(tmp_path), checkpoint_on_stop=checkpoint_on_stop)
    with pytest.raises(ValueError, match="bad config"):
        TrainRun(cfg, LAYOUT, print, Raising()).run()
