"""Slow, not stuck: the rank the others wait for, from real marker files.

The files are written by rtk's own ``MarkerWriter`` into ``tmp_path``; for backward
phases its clock is a fake one the test advances, so each phase lasts what the test
says.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from toolkit.rundir import markers as rundir_markers
from toolkit.rundir.markers import MarkerWriter
from toolkit.stall.slow import (
    BACKWARD,
    BARRIER,
    CPU_SHARE,
    NodeSteps,
    RankSteps,
    SlowRank,
    SlowWatch,
    find_slow_rank,
    node_steps,
    parse_steps,
    rank_steps,
)

NODES = {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}


class FakeClock:
    """Stands in for the ``time`` module of ``toolkit.rundir.markers``."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def monotonic(self) -> float:
        return self.now_s


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    fake = FakeClock()
    monkeypatch.setattr(rundir_markers, "time", fake)
    yield fake


def writers(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, nodes: dict[int, str] = NODES
) -> dict[int, MarkerWriter]:
    found = {}
    for rank, node in nodes.items():
        monkeypatch.setenv("RTK_NODE", node)
        found[rank] = MarkerWriter(run_dir, rank, rank % 2, len(nodes))
    return found


def barrier_run(
    run_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    steps: range,
    wait_s: Callable[[int, int], float],
    nodes: dict[int, str] = NODES,
) -> None:
    """Every rank: step_begin, a forward phase, a barrier with ``wait_s(step, rank)``."""
    ranks = writers(run_dir, monkeypatch, nodes)
    for step in steps:
        for rank, writer in ranks.items():
            writer.write("step_begin", step)
            writer.write("phase_begin", step, name="forward")
            writer.write("phase_end", step, name="forward")
            writer.write("barrier", step, wait_s=wait_s(step, rank), group=None)
            writer.write("step_end", step, tokens=8)
    for writer in ranks.values():
        writer.close()


def backward_run(
    run_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    clock: FakeClock,
    steps: range,
    backward_s: Callable[[int, int], float],
) -> None:
    """Every rank: forward, backward lasting ``backward_s(step, rank)``, optimizer."""
    ranks = writers(run_dir, monkeypatch)
    for step in steps:
        for rank, writer in ranks.items():
            writer.write("step_begin", step)
            for name in ("forward", BACKWARD, "optimizer"):
                writer.write("phase_begin", step, name=name)
                if name == BACKWARD:
                    writer.write("phase_begin", step, name="hook")  # nested, ignored
                    writer.write("phase_end", step, name="hook")
                    clock.now_s += backward_s(step, rank)
                writer.write("phase_end", step, name=name)
            writer.write("step_end", step)
    for writer in ranks.values():
        writer.close()


def every_node(run_dir: Path) -> list[NodeSteps]:
    return [node_steps(str(run_dir), node) for node in sorted(set(NODES.values()))]


def test_a_node_reads_its_own_ranks_barrier_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    barrier_run(tmp_path, monkeypatch, range(100), lambda step, rank: step + rank / 10)
    found = node_steps(str(tmp_path), "node-b", max_steps=64)
    assert found.node == "node-b" and [r.rank for r in found.ranks] == [2, 3]
    three = found.ranks[1]
    assert three.node == "node-b"
    assert three.barrier_steps == tuple(range(36, 100))
    assert three.barrier_wait_s == tuple(step + 0.3 for step in range(36, 100))
    assert three.backward_steps == () and three.backward_s == ()
    # A node no marker names: the ranks written on its host (a run dir of its own).
    assert [r.rank for r in node_steps(str(tmp_path), "node-c").ranks] == [0, 1, 2, 3]
    assert node_steps(str(tmp_path / "elsewhere"), "node-a").ranks == ()


def test_only_the_tail_of_a_long_file_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    barrier_run(tmp_path, monkeypatch, range(500), lambda step, rank: 0.5, {0: "node-a"})
    path = next((tmp_path / "markers").glob("rank-*.jsonl"))
    assert path.stat().st_size > 200_000
    found = rank_steps(path, max_steps=64, tail_bytes=8192)
    assert found is not None and found[1]  # the rank's host
    steps = found[0]
    assert 0 < len(steps.barrier_steps) < 64  # what 8 KB holds of five lines a step
    assert steps.barrier_steps == tuple(range(500 - len(steps.barrier_steps), 500))


def test_a_torn_first_line_and_foreign_lines_are_skipped() -> None:
    def line(**fields: object) -> bytes:
        base = {"v": 1, "rank": 7, "node": "n", "hostname": "h", "mono_s": 1.0, "wall_s": 1.0}
        return json.dumps({**base, **fields}).encode() + b"\n"

    data = (
        b'arrier", "step": 3, "wait_s": 9.0}\n'
        + line(event="barrier", step=4, wait_s=0.25)
        + b'{"event": "barrier", "step": 5, "wait_s": "soon"}\n'
        + b"not json, but a barrier\n"
        + line(event="barrier", step=None, wait_s=0.5)
    )
    found = parse_steps(data, cut=True)
    assert found == (RankSteps(7, "n", (4,), (0.25,)), "h")
    assert parse_steps(line(event="step_end", step=1), cut=False) is None


def test_the_rank_that_waits_least_at_the_barriers_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rank 2 arrives last (it waits 0.01 s, the others 0.8-0.9 s) except every 10th step.
    def wait_s(step: int, rank: int) -> float:
        late = 3 if step % 10 == 0 else 2
        return 0.01 if rank == late else 0.8 + rank / 100

    barrier_run(tmp_path, monkeypatch, range(120), wait_s)
    found = find_slow_rank(every_node(tmp_path))
    assert found == SlowRank(2, "node-b", 45, 50, pytest.approx(0.80), BARRIER)
    assert found is not None and found.share == 0.9
    assert found.line() == (
        "slow, not stuck: rank 2 (node-b) was last at 45 of the last 50 steps; the others "
        "waited 0.80 s a step for it (median; from barriers)"
    )


def test_the_rank_with_the_shortest_backward_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    backward_run(
        tmp_path, monkeypatch, clock, range(80), lambda step, rank: 0.2 if rank == 1 else 1.5
    )
    found = find_slow_rank(every_node(tmp_path))
    assert found == SlowRank(1, "node-a", 50, 50, pytest.approx(1.3), BACKWARD)
    assert found is not None and found.line().endswith(
        "1.3 s a step for it (median; from backward phases)"
    )


def test_steps_with_barriers_are_judged_by_them_not_by_backward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    # Backward says rank 0 is last; the barriers of the same steps say rank 3.
    backward_run(tmp_path, monkeypatch, clock, range(60), lambda s, rank: 0.1 if rank == 0 else 1)
    barrier_run(tmp_path, monkeypatch, range(60), lambda s, rank: 0.0 if rank == 3 else 0.5)
    found = find_slow_rank(every_node(tmp_path))
    assert found is not None and (found.rank, found.source, found.last) == (3, BARRIER, 50)


@pytest.mark.parametrize(
    "wait_s",
    [
        pytest.param(lambda step, rank: 0.8 if rank != step % 4 else 0.0, id="each-in-turn"),
        pytest.param(lambda step, rank: 0.5, id="all-tied"),
        pytest.param(lambda step, rank: 0.02 if rank else 0.0, id="too-small-to-matter"),
        pytest.param(
            lambda step, rank: 0.8 if rank != (2 if step % 2 else (0, 1, 3)[step // 2 % 3]) else 0,
            id="half-of-the-steps",
        ),
    ],
)
def test_nobody_is_named_when_no_rank_stands_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wait_s: Callable[[int, int], float]
) -> None:
    barrier_run(tmp_path, monkeypatch, range(100), wait_s)
    assert find_slow_rank(every_node(tmp_path)) is None


def test_with_two_ranks_one_is_always_last_and_only_a_clear_majority_counts() -> None:
    def run(late_steps: int) -> list[NodeSteps]:
        waits = [(0.0, 0.5) if step < late_steps else (0.5, 0.0) for step in range(50)]
        return [
            NodeSteps(
                "n",
                tuple(
                    RankSteps(rank, "n", tuple(range(50)), tuple(w[rank] for w in waits))
                    for rank in (0, 1)
                ),
            )
        ]

    assert find_slow_rank(run(35)) is None  # 70%: two ranks' chance allows it
    found = find_slow_rank(run(40))  # 80%
    assert found is not None and (found.rank, found.last, found.steps) == (0, 40, 50)


def test_too_few_steps_or_a_single_rank_name_nobody(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    barrier_run(tmp_path, monkeypatch, range(20), lambda step, rank: 0.0 if rank == 1 else 1.0)
    assert find_slow_rank(every_node(tmp_path)) is None
    assert find_slow_rank(every_node(tmp_path), min_steps=20) is not None
    one = [node_steps(str(tmp_path), "node-a")]
    assert find_slow_rank([NodeSteps("node-a", one[0].ranks[:1])], min_steps=1) is None


def test_a_step_not_every_rank_has_yet_is_not_judged() -> None:
    # Only rank 0 has step 40 yet, where it looks last; rank 1 is last at the 40 before.
    ranks = (
        RankSteps(0, "n", tuple(range(41)), (0.5,) * 40 + (0.0,)),
        RankSteps(1, "n", tuple(range(40)), (0.0,) * 40),
        RankSteps(2, "n", tuple(range(40)), (0.5,) * 40),
    )
    found = find_slow_rank([NodeSteps("n", ranks)])
    assert found is not None and (found.rank, found.steps) == (1, 40)


def test_the_watch_names_each_new_culprit_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    barrier_run(tmp_path, monkeypatch, range(60), lambda s, rank: 0.0 if rank == 2 else 0.6)
    asked: list[int] = []

    def ask() -> list[NodeSteps]:
        asked.append(1)
        return every_node(tmp_path)

    watch = SlowWatch(str(tmp_path), interval_s=60.0, ask=ask)
    assert watch.tick(0.0) is None and not asked  # the clock starts
    assert watch.tick(30.0) is None and not asked
    first = watch.tick(60.0)
    assert first is not None and first.startswith("slow, not stuck: rank 2 (node-b)")
    assert watch.answered == 2 and watch.culprit is not None
    barrier_run(tmp_path, monkeypatch, range(60, 80), lambda s, rank: 0.0 if rank == 2 else 0.6)
    assert watch.tick(120.0) is None  # the same culprit: said once
    barrier_run(tmp_path, monkeypatch, range(80, 140), lambda s, rank: 0.0 if rank == 0 else 0.9)
    second = watch.tick(180.0)
    assert second is not None and second.startswith("slow, not stuck: rank 0 (node-a)")
    barrier_run(tmp_path, monkeypatch, range(140, 200), lambda s, rank: 0.5)
    assert watch.tick(240.0) is None and watch.culprit is None
    barrier_run(tmp_path, monkeypatch, range(200, 260), lambda s, rank: 0.0 if rank == 0 else 0.9)
    again = watch.tick(300.0)
    assert again is not None and again.startswith("slow, not stuck: rank 0 (node-a)")
    assert len(asked) == 5


def test_the_watch_without_ray_asks_nobody(tmp_path: Path) -> None:
    watch = SlowWatch(str(tmp_path), interval_s=1.0)
    assert watch.tick(0.0) is None and watch.tick(5.0) is None and watch.answered == 0


def test_an_ask_that_costs_the_driver_more_is_made_less_often(tmp_path: Path) -> None:
    asked: list[float] = []

    def costly() -> list[NodeSteps]:
        started_s = time.process_time()
        while time.process_time() - started_s < 0.02:  # 20 ms of this process's CPU
            pass
        asked.append(started_s)
        return []

    watch = SlowWatch(str(tmp_path), interval_s=1.0, ask=costly)
    watch.tick(0.0)
    watch.tick(1.0)
    assert len(asked) == 1 and watch.cost_s >= 0.02
    wait_s = watch.cost_s / CPU_SHARE  # 8 s or more, not the interval's 1 s
    watch.tick(1.0 + wait_s - 0.5)
    assert len(asked) == 1
    watch.tick(1.0 + wait_s)
    assert len(asked) == 2
