"""Following the marker files as they grow: complete lines only, the watched events."""

from __future__ import annotations

import json
from pathlib import Path

from toolkit.rundir import RunDir
from toolkit.rundir.follow import MarkerFollower


def test_the_follower_reads_only_complete_new_lines(tmp_path: Path) -> None:
    path = RunDir(tmp_path).marker(0)
    path.parent.mkdir(parents=True)
    line = {"event": "step_end", "step": 3, "wall_s": 10.0, "rank": 0, "node": "n0"}
    path.write_text(json.dumps(line) + "\n" + '{"event": "step_end", "st')
    follower = MarkerFollower(tmp_path)
    (first,) = follower.poll()
    assert (first.event, first.step, first.rank, first.node) == ("step_end", 3, 0, "n0")
    assert follower.poll() == []  # the partial line waits
    with path.open("a") as f:
        f.write('ep": 4, "wall_s": 11.0, "rank": 0, "node": "n0"}\n')
        f.write(
            json.dumps(
                {"event": "phase_begin", "name": "ckpt", "wall_s": 12.0, "rank": 0, "node": "n0"}
            )
            + "\n"
        )
        f.write(
            json.dumps({"event": "barrier", "step": 4, "wall_s": 12.5, "rank": 0, "node": "n0"})
            + "\n"
        )
    assert [(p.event, p.step, p.phase) for p in follower.poll()] == [
        ("step_end", 4, None),
        ("phase_begin", None, "ckpt"),
    ]
    assert follower.rank_nodes == {0: "n0"}
