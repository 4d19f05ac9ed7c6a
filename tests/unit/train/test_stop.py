"""SIGINT while a run that stops with a checkpoint trains: real signals to this process."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from toolkit.rundir import RunDir
from toolkit.train.stop import StopOnInterrupt, stopped


class WaitsForTheRequest:
    """Stands in for Ray Train's trainer: returns once the run's stop request is there."""

    def __init__(self, run_dir: RunDir, give_up: threading.Event) -> None:
        self.run_dir = run_dir
        self.give_up = give_up
        self.calls = 0

    def fit(self) -> Any:
        self.calls += 1
        while not self.run_dir.stop_request.exists():
            if self.give_up.wait(0.01):
                return "abandoned"
        return "stopped at a step"


def interrupt_soon(times: int = 1) -> None:
    def send() -> None:
        for _ in range(times):
            os.kill(os.getpid(), signal.SIGINT)
            threading.Event().wait(0.2)

    threading.Timer(0.2, send).start()


def test_sigint_writes_the_stop_request_and_fit_returns(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run.stop_request.write_text("left by the last allocation")
    stop = StopOnInterrupt(run, poll_s=0.05)
    stop.clear()
    assert not run.stop_request.exists() and not stopped(stop)
    before = signal.getsignal(signal.SIGINT)
    give_up = threading.Event()
    trainer = WaitsForTheRequest(run, give_up)
    interrupt_soon()
    try:
        assert stop.fit(trainer) == "stopped at a step"
    finally:
        give_up.set()
    assert trainer.calls == 1 and stopped(stop)
    assert json.loads(run.stop_request.read_text())["why"] == "SIGINT"
    assert signal.getsignal(signal.SIGINT) is before


def test_a_second_sigint_stops_waiting(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    stop = StopOnInterrupt(run, poll_s=0.05)
    give_up = threading.Event()

    class Deaf(WaitsForTheRequest):
        def fit(self) -> Any:
            give_up.wait(30)
            return "too late"

    interrupt_soon(times=2)
    try:
        with pytest.raises(KeyboardInterrupt):
            stop.fit(Deaf(run, give_up))
    finally:
        give_up.set()
    assert run.stop_request.exists()


def test_what_fit_raised_is_raised_in_the_caller(tmp_path: Path) -> None:
    class Failing:
        def fit(self) -> Any:
            raise RuntimeError("worker group failed")

    with pytest.raises(RuntimeError, match="worker group failed"):
        StopOnInterrupt(RunDir(tmp_path), poll_s=0.05).fit(Failing())
