"""scripts/stall_fault_suite.py's scoring: the culprit first, its node, its cause, the collective.

The runs here are run directories written as rtk writes them (markers, stall.json);
the suite's real runs are its own command's and tests/integration's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))

from stall_fault_suite import FAULTS, FaultRun, Outcome, score, table  # noqa: E402

FAULT = {f.name: f for f in FAULTS}
SKIP_LINE = (
    "stalled at step 29 for 23 s: all_reduce #31 (group 0, 8.5 KiB) does not match: "
    "rank 1 (node2) calls barrier where the others call all_reduce"
)


def _run(
    tmp_path: Path,
    stall: dict[str, object] | None,
    code: int = 1,
    lines: tuple[tuple[float, str], ...] = (),
) -> FaultRun:
    run_dir = tmp_path / "run"
    (run_dir / "markers").mkdir(parents=True)
    for rank, node in enumerate(("node1", "node2", "node3")):
        first = {"v": 1, "event": "run_start", "rank": rank, "node": node}
        (run_dir / "markers" / f"rank-{rank:05d}.jsonl").write_text(json.dumps(first) + "\n")
    if stall is not None:
        (run_dir / "stall.json").write_text(json.dumps([stall]))
    output = "".join(line for _, line in lines)
    return FaultRun(subprocess.CompletedProcess([], code, output, ""), run_dir, lines, 1000.0)


def _stall(first: dict[str, object], summary: str = SKIP_LINE, **more: object) -> dict[str, object]:
    return {
        "summary": summary,
        "detected_wall_s": 1022.5,
        "stalled_s": 22.5,
        "collect_s": 3.0,
        "suspects": [first],
        **more,
    }


SKIPPED = {"op": "all_reduce", "seq": 31, "missing": {}, "mismatched": {"1": "barrier ..."}}


def test_the_right_culprit_cause_and_collective_score_right(tmp_path: Path) -> None:
    first = {"rank": 1, "node": "node2", "reason": "wait in barrier at faults.py:140"}
    outcome = score(FAULT["skip"], _run(tmp_path, _stall(first, collectives=[SKIPPED])))
    assert outcome == Outcome("skip", FAULT["skip"].expected, SKIP_LINE, True, 25.5)


def test_another_rank_node_cause_or_no_collective_score_wrong(tmp_path: Path) -> None:
    cases = {
        "first suspect on node1, not node2": (
            {"rank": 0, "node": "node1", "reason": "x"}, [SKIPPED], SKIP_LINE,
        ),
        "the collective was not named": (
            {"rank": 1, "node": "node2", "reason": "x"}, [], SKIP_LINE,
        ),
        "cause 'x', not 'barrier where the others call all_reduce'": (
            {"rank": 1, "node": "node2", "reason": "x"}, [SKIPPED], "stalled at step 29",
        ),
    }  # fmt: skip
    for why, (first, collectives, line) in cases.items():
        run = _run(tmp_path / why[:5], _stall(first, line, collectives=collectives))
        outcome = score(FAULT["skip"], run)
        assert not outcome.correct and outcome.why.startswith(why), (why, outcome)


def test_a_control_is_right_only_without_a_stall_and_with_a_clean_exit(tmp_path: Path) -> None:
    assert score(FAULT["uneven"], _run(tmp_path / "a", None, code=0)).correct
    first = {"rank": 0, "node": "node1", "reason": "x"}
    claimed = score(FAULT["checkpoint"], _run(tmp_path / "b", _stall(first), code=1))
    assert not claimed.correct and claimed.why == "a stall was claimed for a healthy run"
    missed = score(FAULT["stop"], _run(tmp_path / "c", None, code=1))
    assert not missed.correct and missed.why == "no stall was diagnosed"
    rows = table([claimed, missed]).splitlines()
    assert rows[0] == "| fault | expected | named | right | seconds |" and len(rows) == 4
    assert rows[2].startswith("| checkpoint | no stall | ") and "**no**: a stall" in rows[2]


def test_a_failed_run_is_right_when_rtk_names_the_rank_its_node_and_the_cause(
    tmp_path: Path,
) -> None:
    named = (
        "rtk torchrun: torchrun on node2 exited 1: rank 1 (local_rank 0) failed first: "
        "killed by SIGKILL; stopping the other nodes\n"
    )
    right = score(FAULT["kill"], _run(tmp_path / "a", None, lines=((1004.5, named),)))
    assert right.correct and right.seconds == 4.5, right
    bare = "rtk torchrun: torchrun on node2 exited 1; stopping the other nodes\n"
    wrong = score(FAULT["kill"], _run(tmp_path / "b", None, lines=((1004.5, bare),)))
    assert not wrong.correct and wrong.why == "no rank was named as the first failure"
    elsewhere = named.replace("node2", "node3")
    wrong = score(FAULT["kill"], _run(tmp_path / "c", None, lines=((1004.5, elsewhere),)))
    assert not wrong.correct and wrong.why == "not named on node2"
