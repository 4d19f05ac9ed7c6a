"""The job driver's watchdog on real marker files, with a clock and a collector of its own."""

from __future__ import annotations

import json
from pathlib import Path

from toolkit.rundir import RunDir
from toolkit.stall.records import STOPPED, Frame, NodeEvidence, RankEvidence, read_stalls
from toolkit.stall.settings import ABORT, REPORT, RESTART_EXCLUDING, WatchSettings
from toolkit.stall.watchdog import Watchdog

WAIT = (Frame("all_reduce", "/v/lib/python3.11/site-packages/torch/distributed/c10d.py", 9),)


class Clock:
    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def evidence(run_dir: str, per_node_timeout_s: float) -> list[NodeEvidence]:
    stopped = RankEvidence(1, "n1", pid=7, state=STOPPED, frames=(Frame("main", "train.py", 3),))
    waiting = RankEvidence(0, "n0", pid=6, state="sleeping", frames=WAIT, stack_source="py-spy")
    return [NodeEvidence("n0", (waiting,)), NodeEvidence("n1", (stopped,))]


def _watchdog(
    tmp_path: Path, policy: str, clock: Clock, said: list[str], acted: list[str]
) -> Watchdog:
    return Watchdog(
        str(tmp_path),
        WatchSettings(policy=policy, timeout_s=5.0),
        said.append,
        abort=lambda record: acted.append(f"abort {record.step}"),
        restart=lambda record: acted.append(f"restart {','.join(record.excluded)}"),
        collector=evidence,
        clock=clock,
    )


def test_a_stall_is_declared_once_recorded_and_a_resume_said(tmp_path: Path) -> None:
    clock = Clock(1000.0)
    said: list[str] = []
    acted: list[str] = []
    watchdog = _watchdog(tmp_path, REPORT, clock, said, acted)
    path = RunDir(tmp_path).marker(0)
    path.parent.mkdir(parents=True)
    with path.open("w") as f:
        for step in range(10):
            f.write(
                json.dumps(
                    {
                        "event": "step_end",
                        "step": step,
                        "wall_s": 1000.0 + step,
                        "rank": 0,
                        "node": "n0",
                    }
                )
                + "\n"
            )
    clock.now_s = 1012.0  # 3 s after step 9: within the 5 s timeout
    assert watchdog.tick() is None
    clock.now_s = 1015.0  # 6 s after step 9
    record = watchdog.tick()
    assert record is not None and record.step == 9 and record.stalled_s == 6.0
    assert [s.rank for s in record.suspects] == [1]
    assert read_stalls(RunDir(tmp_path).stall) == [record]
    assert any(
        line.startswith("stalled at step 9 for 6 s: rank 1 (n1) is stopped") for line in said
    )
    assert acted == []  # report: nothing done
    clock.now_s = 1030.0
    assert watchdog.tick() is None  # declared once
    with path.open("a") as f:
        f.write(
            json.dumps({"event": "step_end", "step": 10, "wall_s": 1031.0, "rank": 0, "node": "n0"})
            + "\n"
        )
    clock.now_s = 1031.5
    watchdog.tick()
    assert "resumed at step 10 after 22 s" in said


def test_the_policies_act_on_the_record(tmp_path: Path) -> None:
    for policy, expected in ((ABORT, "abort 1"), (RESTART_EXCLUDING, "restart n1")):
        run_dir = tmp_path / policy
        path = RunDir(run_dir).marker(0)
        path.parent.mkdir(parents=True)
        path.write_text(
            "".join(
                json.dumps(
                    {"event": "step_end", "step": s, "wall_s": 100.0 + s, "rank": 0, "node": "n0"}
                )
                + "\n"
                for s in range(2)
            )
        )
        clock, said, acted = Clock(100.0), [], []  # type: ignore[var-annotated]
        watchdog = _watchdog(run_dir, policy, clock, said, acted)
        clock.now_s = 110.0
        record = watchdog.tick()
        assert record is not None and acted == [expected]
        assert watchdog.aborted.is_set() == (policy == ABORT)
        assert read_stalls(RunDir(run_dir).stall)[0].excluded == (
            ("n1",) if policy == RESTART_EXCLUDING else ()
        )


def _steps(path: Path, steps: range, rank: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for step in steps:
            line = {"event": "step_end", "step": step, "wall_s": 100.0 + step}
            f.write(json.dumps({**line, "rank": rank, "node": f"n{rank}"}) + "\n")


def test_a_run_whose_ranks_all_exited_after_the_last_step_is_not_a_stall(tmp_path: Path) -> None:
    """A driver slow to see its ranks' exits waits past the timeout: that is the end."""
    _steps(RunDir(tmp_path).marker(0), range(3))

    def gone(run_dir: str, per_node_timeout_s: float) -> list[NodeEvidence]:
        return [NodeEvidence("n0", (RankEvidence(0, "n0", pid=6, state="gone"),))]

    said: list[str] = []
    acted: list[str] = []
    clock = Clock(100.0)
    watchdog = Watchdog(
        str(tmp_path),
        WatchSettings(policy=ABORT, timeout_s=5.0),
        said.append,
        abort=lambda record: acted.append("abort"),
        collector=gone,
        clock=clock,
    )
    clock.now_s = 110.0  # 8 s after step 2
    assert watchdog.tick() is None
    assert not RunDir(tmp_path).stall.exists() and acted == []
    assert not any("stalled" in line for line in said)

    # The same with one node silent: that may be the cause, so it is a stall.
    def one_silent(run_dir: str, per_node_timeout_s: float) -> list[NodeEvidence]:
        return [*gone(run_dir, per_node_timeout_s), NodeEvidence("n1", error="timed out")]

    _steps(RunDir(tmp_path / "b").marker(0), range(3))
    clock.now_s = 100.0
    watchdog = Watchdog(
        str(tmp_path / "b"),
        WatchSettings(policy=ABORT, timeout_s=5.0),
        said.append,
        abort=lambda record: acted.append("abort"),
        collector=one_silent,
        clock=clock,
    )
    clock.now_s = 110.0
    assert watchdog.tick() is not None and acted == ["abort"]


def test_a_checkpoint_read_late_from_a_rank_behind_does_not_stretch_the_timeout(
    tmp_path: Path,
) -> None:
    """Rank 1's file is read after rank 0's: its checkpoint of step 4 is behind step 5."""
    layout = RunDir(tmp_path)
    _steps(layout.marker(0), range(6), rank=0)
    _steps(layout.marker(1), range(5), rank=1)
    with layout.marker(1).open("a") as f:
        line = {"event": "phase_begin", "name": "checkpoint", "step": 4, "wall_s": 104.5}
        f.write(json.dumps({**line, "rank": 1, "node": "n1"}) + "\n")
    clock = Clock(100.0)
    said: list[str] = []
    watchdog = Watchdog(
        str(tmp_path), WatchSettings(policy=REPORT, timeout_s=4.0), said.append,
        collector=evidence, clock=clock,
    )  # fmt: skip
    clock.now_s = 110.0  # 5 s after step 5 (timeout 4 s); a stretched one would be 40 s
    record = watchdog.tick()
    assert record is not None and record.step == 5 and record.timeout_s == 4.0
