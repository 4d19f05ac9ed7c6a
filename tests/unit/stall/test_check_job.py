"""``rtk stall-check``'s job: the stall read from real marker files, and a check of real ranks.

The run's progress comes from marker files written here (``Marker`` records, their
times chosen); the check runs against real rank processes (``tests/rank_processes.py``),
their evidence read on this machine by ``node_evidence`` as each node's Ray task would
(the Ray side is ``tests/integration/test_stall_collect.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rank_processes import Ranks

from toolkit.rundir import RunDir
from toolkit.rundir.markers import Marker, MarkerFollower, Progress
from toolkit.stall.check_job import (
    CHECK_TIMEOUT_S,
    EXIT_NOTHING_TO_CHECK,
    RunProgress,
    check,
    progress_of,
    read_progress,
    seconds,
)
from toolkit.stall.detector import Stall
from toolkit.stall.node_evidence import node_evidence
from toolkit.stall.records import NodeEvidence, StallRecord, read_stalls
from toolkit.stall.settings import (
    CHECK,
    CHECK_RECORD_PREFIX,
    CHECK_REFUSED,
    PER_NODE_TIMEOUT_S,
    CheckOptions,
)

T0 = 1.7e9  # a wall time: the run's first marker


def marker(rank: int, event: str, step: int | None, wall_s: float, node: str = "n1") -> str:
    """One marker line, as a rank writes it."""
    record = Marker(event, step, wall_s, 100.0, node, node, rank, rank, 8, None, 4000 + rank)
    return json.dumps(record.to_json()) + "\n"


def write_ranks(run_dir: Path, ranks: dict[int, list[str]]) -> None:
    layout = RunDir(run_dir)
    layout.markers_dir.mkdir(parents=True, exist_ok=True)
    for rank, lines in ranks.items():
        layout.marker(rank).write_text("".join(lines))


def steps(rank: int, count: int, step_s: float, lag_s: float = 0.0, node: str = "n1") -> list[str]:
    """run_start, then ``count`` steps of ``step_s`` each, ``lag_s`` behind the others."""
    lines = [marker(rank, "run_start", None, T0, node)]
    for step in range(count):
        end_s = T0 + (step + 1) * step_s + lag_s
        lines.append(marker(rank, "step_begin", step, end_s - step_s, node))
        lines.append(marker(rank, "step_end", step, end_s, node))
    return lines


# --- the options, as the CLI sends them --------------------------------------------


def test_the_options_round_trip_and_default() -> None:
    options = CheckOptions("~/rtk-runs/r1", 30.0, as_json=True)
    assert CheckOptions.from_json(json.loads(json.dumps(options.to_json()))) == options
    assert CheckOptions.from_json({"run_dir": "/r"}) == CheckOptions("/r", PER_NODE_TIMEOUT_S)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ({"per_node_timeout_s": 5}, "run_dir must be a path"),
        ({"run_dir": ""}, "run_dir must be a path"),
        ({"run_dir": "/r", "per_node_timeout_s": 0}, "--per-node-timeout-s must be a positive"),
        ({"run_dir": "/r", "per_node_timeout_s": True}, "--per-node-timeout-s must be a positive"),
        (["/r"], "expected an object"),
    ],
)
def test_options_that_cannot_be_checked_are_refused(data: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        CheckOptions.from_json(data)


# --- the run's progress, from its markers -------------------------------------------


def test_the_last_step_is_dated_by_the_first_rank_that_finished_it(tmp_path: Path) -> None:
    # Rank 1 finishes every step 0.5 s after rank 0; steps take 2 s.
    write_ranks(tmp_path, {0: steps(0, 10, 2.0), 1: steps(1, 10, 2.0, lag_s=0.5, node="n2")})
    progress = read_progress(str(tmp_path))
    assert progress is not None
    assert (progress.step, progress.step_end_s) == (9, T0 + 20.0)
    assert progress.step_s == pytest.approx(2.0)
    assert progress.rank_nodes == {0: "n1", 1: "n2"}
    assert progress.stall(T0 + 95.0) == Stall(step=9, stalled_s=75.0, timeout_s=CHECK_TIMEOUT_S)
    assert progress.line(T0 + 95.0) == "step 9 finished 75 s ago; recent steps took 2 s (median)"


def test_a_rank_behind_does_not_move_the_last_step_back(tmp_path: Path) -> None:
    write_ranks(tmp_path, {0: steps(0, 12, 1.0), 1: steps(1, 4, 1.0)})
    progress = read_progress(str(tmp_path))
    assert progress is not None and (progress.step, progress.step_end_s) == (11, T0 + 12.0)


def test_before_the_first_step_the_stall_runs_from_the_first_marker(tmp_path: Path) -> None:
    write_ranks(
        tmp_path,
        {
            0: [marker(0, "run_start", None, T0 + 3.0), marker(0, "step_begin", 0, T0 + 4.0)],
            1: [marker(1, "run_start", None, T0)],
        },
    )
    progress = read_progress(str(tmp_path))
    assert progress == RunProgress(None, None, T0, None, {})
    assert progress.stall(T0 + 300.0) == Stall(None, 300.0, CHECK_TIMEOUT_S)
    assert progress.line(T0 + 300.0) == (
        "no step finished yet; the first marker was written 300 s ago"
    )


def test_only_each_files_tail_is_read_from_a_whole_line(tmp_path: Path) -> None:
    write_ranks(tmp_path, {0: steps(0, 2000, 1.0)})
    size = RunDir(tmp_path).marker(0).stat().st_size
    assert size > 4096 * 20
    for tail_bytes in (4096, 4097, 4099, 4100, 4111):  # cuts inside lines and at their ends
        progress = read_progress(str(tmp_path), tail_bytes=tail_bytes)
        assert progress is not None
        assert (progress.step, progress.step_end_s) == (1999, T0 + 2000.0)
        assert progress.step_s == pytest.approx(1.0)


@pytest.mark.parametrize(("extra", "steps_read"), [(-1, []), (0, [4]), (1, [4]), (2, [4])])
def test_a_tail_begins_at_its_first_whole_line(
    tmp_path: Path, extra: int, steps_read: list[int]
) -> None:
    write_ranks(tmp_path, {0: steps(0, 5, 1.0)})
    last = marker(0, "step_end", 4, T0 + 5.0)
    assert RunDir(tmp_path).marker(0).read_text().endswith(last)
    follower = MarkerFollower(str(tmp_path), tail_bytes=len(last) + extra)
    assert [p.step for p in follower.poll()] == steps_read
    assert follower.read_bytes == (len(last) if steps_read else 0)
    with RunDir(tmp_path).marker(0).open("a") as f:
        f.write(marker(0, "step_end", 5, T0 + 6.0))
    assert [p.step for p in follower.poll()] == [5]  # then it follows, as the watchdog's


def test_a_tail_without_a_finished_step_has_the_whole_file_read(tmp_path: Path) -> None:
    # The last step ended long ago; since then the rank wrote many other markers.
    chatter = [marker(0, "barrier", 5, T0 + 10.0 + i) for i in range(200)]
    write_ranks(tmp_path, {0: [*steps(0, 5, 2.0), *chatter]})
    progress = read_progress(str(tmp_path), tail_bytes=2048)
    assert progress is not None and (progress.step, progress.step_end_s) == (4, T0 + 10.0)


def test_no_marker_files_or_no_whole_marker_is_no_progress(tmp_path: Path) -> None:
    assert read_progress(str(tmp_path)) is None
    write_ranks(tmp_path, {0: ['{"v": 1, "event": "run_st']})  # a torn first line
    assert read_progress(str(tmp_path)) is None


def test_progress_of_events_in_any_order() -> None:
    def end(rank: int, step: int, wall_s: float) -> Progress:
        return Progress("step_end", step, wall_s, rank, f"n{rank}")

    events = [end(1, 3, 13.0), end(0, 1, 11.0), end(0, 3, 12.5), end(0, 2, 12.0), end(1, 1, 11.2)]
    progress = progress_of(events, None, {0: "n0"})
    assert (progress.step, progress.step_end_s, progress.rank_nodes) == (3, 12.5, {0: "n0"})
    assert progress.step_s == pytest.approx(0.75)  # steps 2 and 3, 1.0 s and 0.5 s
    assert progress_of([]).step is None and progress_of([]).stall(5.0).stalled_s == 0.0


@pytest.mark.parametrize(
    ("value_s", "text"), [(95.4, "95 s"), (10.0, "10 s"), (1.234, "1.2 s"), (0.0421, "0.042 s")]
)
def test_seconds_in_words(value_s: float, text: str) -> None:
    assert seconds(value_s) == text


# --- the check ------------------------------------------------------------------------


def test_a_missing_run_directory_or_one_without_markers_is_refused(tmp_path: Path) -> None:
    said: list[str] = []
    asked: list[str] = []

    def collector(run_dir: str, per_node_timeout_s: float) -> list[NodeEvidence]:
        asked.append(run_dir)
        return []

    missing = CheckOptions(str(tmp_path / "nowhere"))
    assert check(missing, said.append, collector) == EXIT_NOTHING_TO_CHECK
    assert len(said) == 1 and said[0].startswith(f"{CHECK_REFUSED}{tmp_path / 'nowhere'}: ")
    assert "no such directory on the head" in said[0]
    (tmp_path / "empty").mkdir()
    assert check(CheckOptions(str(tmp_path / "empty")), said.append, collector) == 1
    assert said[1].startswith(CHECK_REFUSED) and "no rank's markers in" in said[1]
    assert asked == [] and not (tmp_path / "empty" / "stall.json").exists()


def test_a_check_names_the_stopped_rank_and_keeps_its_record(ranks: Ranks) -> None:
    pids = [ranks.start(rank, node="here") for rank in range(3)]
    ranks.stop(pids[1])
    run_dir = str(ranks.run_dir)
    said: list[str] = []
    printed: list[str] = []
    now_s = read_progress(run_dir).step_end_s + 42.0  # type: ignore[union-attr, operator]

    def here(run: str, per_node_timeout_s: float) -> list[NodeEvidence]:
        assert (run, per_node_timeout_s) == (run_dir, 20.0)
        return [node_evidence(run, "here", per_node_timeout_s / 5)]

    options = CheckOptions(run_dir, 20.0, as_json=True)
    assert check(options, said.append, here, clock=lambda: now_s, out=printed.append) == 0
    assert said[0] == (
        "step 0 finished 42 s ago; asking every node for its ranks' stacks (each within 20 s)"
    )
    summary = said[1]
    assert summary.startswith("stalled at step 0 for 42 s: rank 1 (here) is stopped"), summary
    assert "  rank 1 (here) is stopped (SIGSTOP or a debugger)" in said
    assert said[-1] == f"every rank's stack: {RunDir(run_dir).stall}"
    (kept,) = read_stalls(RunDir(run_dir).stall)
    assert (kept.action, kept.timeout_s, kept.step) == (CHECK, 0.0, 0)
    assert kept.stalled_s == pytest.approx(42.0)
    assert [(s.rank, s.node) for s in kept.suspects] == [(1, "here")]
    assert [r.pid for r in kept.nodes[0].ranks] == pids
    (line,) = printed
    assert line.startswith(CHECK_RECORD_PREFIX)
    assert StallRecord.from_json(json.loads(line[len(CHECK_RECORD_PREFIX) :])) == kept


def test_a_second_check_adds_to_stall_json_and_an_unwritable_one_is_said(
    tmp_path: Path,
) -> None:
    write_ranks(tmp_path, {0: steps(0, 3, 1.0)})
    said: list[str] = []

    def nobody(run_dir: str, per_node_timeout_s: float) -> list[NodeEvidence]:
        return []  # a Ray cluster rtk did not bring up: no node to ask

    assert check(CheckOptions(str(tmp_path)), said.append, nobody, clock=lambda: T0 + 60) == 0
    assert "no node of this Ray cluster is one rtk brought up" in said[1]
    assert said[2] == "stalled at step 2 for 57 s: no rank gave evidence"
    assert check(CheckOptions(str(tmp_path)), said.append, nobody, clock=lambda: T0 + 70) == 0
    assert [s.stalled_s for s in read_stalls(RunDir(tmp_path).stall)] == [57.0, 67.0]
    RunDir(tmp_path).stall.write_text("{broken")
    said.clear()
    assert check(CheckOptions(str(tmp_path)), said.append, nobody, clock=lambda: T0 + 80) == 0
    assert said[-1].startswith(f"could not add the check to {RunDir(tmp_path).stall}: ")
