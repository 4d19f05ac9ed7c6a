"""The job-driver runtime, with real processes as workloads: no Ray (the evidence of a
stall is this machine's, the GPUs a model's, ``tests/power_model.py``)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from power_model import MAX_W, ModelNodes
from rank_processes import REPO, WAIT_FUNCTION

from toolkit.jobdriver.runtime import DriverOptions, JobDriver
from toolkit.power.settings import OPTIMIZE, PowerSettings
from toolkit.rundir import RunDir
from toolkit.stall.node_evidence import node_evidence
from toolkit.stall.records import NodeEvidence, read_stalls
from toolkit.stall.settings import STALL_EXIT, WatchSettings
from toolkit.telemetry.record_job import CommandRun


def here(run_dir: str, per_node_timeout_s: float) -> list[NodeEvidence]:
    return [node_evidence(run_dir, os.uname().nodename, per_node_timeout_s / 5)]


class Around:
    """What runs around the run, as a list of what happened when."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def begin(self) -> None:
        self.events.append("begin")

    def end(self, code: int | None) -> None:
        self.events.append(f"end {code}")


class Steps:
    """A workload that writes rank 0's step markers, ``step_s`` apart, until ``done``."""

    def __init__(self, run_dir: Path, done: threading.Event, step_s: float = 0.02) -> None:
        self.path = RunDir(run_dir).marker(0)
        self.done, self.step_s = done, step_s
        self.model: ModelNodes | None = None
        self.stopped = False

    def run(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + 60
        step = 0
        while not self.done.is_set() and not self.stopped:
            assert time.monotonic() < deadline, "the workload was never done"
            step += 1
            wall_s = time.time()
            if self.model is not None:
                self.model.step(step)
                wall_s = self.model.wall_s
            line = {"event": "step_end", "step": step, "wall_s": wall_s, "rank": 0, "node": "n0"}
            with self.path.open("a") as f:
                f.write(json.dumps(line) + "\n")
            time.sleep(self.step_s)
        return 0

    def stop(self) -> None:
        self.stopped = True


def test_a_workload_that_finishes_is_walked_in_order(tmp_path: Path) -> None:
    events: list[str] = []
    done = threading.Event()
    done.set()  # done at once
    said: list[str] = []
    driver = JobDriver(
        DriverOptions(str(tmp_path), said.append, stall=WatchSettings(policy="abort")),
        Steps(tmp_path, done),
        Around(events),
        collector=here,
    )
    assert driver.run() == 0
    assert events == ["begin", "end 0"]
    assert driver.watchdog is not None and not driver.watchdog.aborted.is_set()
    assert driver.power is None  # measure: no policy runs
    assert not RunDir(tmp_path).stall.exists()
    assert signal.getsignal(signal.SIGTERM) is not driver._on_signal  # handlers given back


# A rank that finishes two steps, then hangs in wait_here() (from rank_processes).
HANGS = f"""
import sys, time
sys.path.insert(0, {str(REPO)!r})
from toolkit import markers
for _ in range(2):
    markers.begin_step()
    markers.end_step(tokens=1)
def {WAIT_FUNCTION}():
    while True:
        time.sleep(3600)
{WAIT_FUNCTION}()
"""


def test_a_workload_that_stalls_is_named_stopped_and_ends_with_the_stall_status(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    events: list[str] = []
    said: list[str] = []
    os.environ["RTK_NODE"] = os.uname().nodename
    try:
        code = JobDriver(
            DriverOptions(
                str(tmp_path),
                said.append,
                stall=WatchSettings(policy="abort", timeout_s=2.0),
                watch_from_first_step=True,
            ),
            CommandRun([sys.executable, "-c", HANGS], tmp_path),
            Around(events),
            collector=here,
        ).run()
    finally:
        del os.environ["RTK_NODE"]
    assert code == STALL_EXIT
    assert events == ["begin", f"end {STALL_EXIT}"]  # ended, not by a signal
    (stall,) = read_stalls(RunDir(tmp_path).stall)
    assert stall.step == 1 and stall.action == "abort"
    ((rank,),) = [n.ranks for n in stall.nodes]
    assert any(f.function == WAIT_FUNCTION for f in rank.frames)
    text = "\n".join(said)
    assert "stalled at step 1 for" in text, text
    assert "--on-stall abort: stopping the job on every node" in text


def test_a_command_without_markers_is_never_called_stalled(tmp_path: Path) -> None:
    said: list[str] = []
    options = DriverOptions(
        str(tmp_path),
        said.append,
        stall=WatchSettings(policy="abort", timeout_s=0.5, startup_timeout_s=0.5),
        watch_from_first_step=True,
    )
    command = [sys.executable, "-c", "import time; time.sleep(3); raise SystemExit(3)"]
    assert JobDriver(options, CommandRun(command, tmp_path), collector=here).run() == 3
    assert not RunDir(tmp_path).stall.exists()
    assert not [line for line in said if "stall" in line]


# A command that says when it got SIGTERM (a torchrun driver putting its limits back).
ENDS_ON_SIGTERM = """
import signal, sys, time
from pathlib import Path
def ended(signum, frame):
    Path(sys.argv[1]).write_text("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, ended)
Path(sys.argv[1] + ".ready").write_text("")
time.sleep(60)
"""


class Recorded(JobDriver):
    """The runtime, with its put-back recorded in the order things happen."""

    events: list[str]

    def put_back(self) -> None:
        self.events.append("put back")
        super().put_back()


def test_a_signal_puts_the_limits_back_first_then_stops_the_workload_then_tears_down(
    tmp_path: Path,
) -> None:
    said = tmp_path / "said"
    events: list[str] = []

    def interrupt() -> None:
        while not Path(f"{said}.ready").exists():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    command = CommandRun([sys.executable, "-c", ENDS_ON_SIGTERM, str(said)], tmp_path)
    driver = Recorded(DriverOptions(str(tmp_path), print), command, Around(events))
    driver.events = events
    with pytest.raises(SystemExit) as ended:
        driver.run()
    assert ended.value.code == 128 + signal.SIGINT
    # The limits went back in the handler, before the command heard of it; the teardown
    # came after (its put-back is then nothing more to do), and what ran around the run
    # ended as after a signal.
    assert events == ["begin", "put back", "put back", "end None"]
    assert said.read_text() == "SIGTERM"  # not SIGKILL: the command ended on its own terms


def test_a_node_that_refuses_a_limit_is_one_line_and_the_run_goes_on(tmp_path: Path) -> None:
    model = ModelNodes({"n0": 1})
    model.refuse = "setting the power limit needs root on n0"
    said: list[str] = []
    done = threading.Event()
    steps = Steps(tmp_path, done)
    steps.model = model

    def say(line: str) -> None:
        said.append(line)
        if "could not be set" in line:
            done.set()

    options = DriverOptions(str(tmp_path), say, power=PowerSettings(policy=OPTIMIZE))
    driver = JobDriver(options, steps, power_nodes=model)
    assert driver.run() == 0
    (refusal,) = [line for line in said if "could not be set" in line]
    assert refusal.startswith("power: ") and "needs root on n0" in refusal
    assert "the run goes on at the default limits" in refusal
    assert set(model.limits_w.values()) == {MAX_W}
    assert driver.power is not None and driver.power.done
