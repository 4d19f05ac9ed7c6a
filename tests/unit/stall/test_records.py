"""stall.json's records: written, read back the same, and bad input named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.errors import RunDirError
from toolkit.rundir import RunDir
from toolkit.stall.records import (
    STOPPED,
    Frame,
    NodeEvidence,
    RankEvidence,
    StallRecord,
    Suspect,
    append_stall,
    read_stalls,
)


def _stall(step: int) -> StallRecord:
    frame = Frame("next", "/srv/job/train.py", 88)
    rank = RankEvidence(
        rank=5,
        node="node03",
        pid=4242,
        local_rank=2,
        gpu="2",
        state=STOPPED,
        frames=(frame, Frame("<module>", "/srv/job/train.py", 120)),
        stack_source="py-spy",
        last_event="step_end",
        last_step=step,
        last_wall_s=1.5e9,
    )
    return StallRecord(
        detected_wall_s=1.5e9 + 95,
        step=step,
        stalled_s=95.0,
        timeout_s=60.0,
        summary=f"stalled at step {step} for 95 s: rank 5 (node03) is stopped",
        groups={"stopped": 1, "wait in allreduce": 15},
        suspects=(Suspect("node03", "stopped", 5, frame), Suspect("node04", "did not answer")),
        nodes=(
            NodeEvidence("node03", (rank,), None, 0.4),
            NodeEvidence("node04", (), "timeout", 10.0),
        ),
        collect_s=10.2,
    )


def test_stalls_are_appended_and_read_back_equal(tmp_path: Path) -> None:
    path = RunDir(tmp_path).stall
    assert read_stalls(path) == []
    append_stall(path, _stall(812))
    append_stall(path, _stall(900))
    assert read_stalls(path) == [_stall(812), _stall(900)]
    assert _stall(1).suspects[0].frame is not None
    assert _stall(1).suspects[0].frame.where == "train.py:88"


def test_an_unknown_process_state_is_named(tmp_path: Path) -> None:
    data = _stall(3).to_json()
    data["nodes"][0]["ranks"][0]["state"] = "sleepy"
    path = tmp_path / "stall.json"
    path.write_text(json.dumps([data]))
    with pytest.raises(RunDirError, match="state"):
        read_stalls(path)


def test_a_file_that_is_not_a_list_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "stall.json"
    path.write_text("{}")
    with pytest.raises(RunDirError, match="list of stalls"):
        read_stalls(path)
