"""inputs/phase_markers.py: phases paired by name, and each rank's wait at a step's
collective derived from its backward phases (docs/markers.md).

The marker files are written by rtk's own ``MarkerWriter`` with its clock set by the
test (``Clock``), so every time is known; ``reduce_markers`` reads them as the report does.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from toolkit.rundir import markers as marker_module
from toolkit.rundir.layout import RunDir
from toolkit.rundir.markers import MarkerWriter
from toolkit.telemetry.report.inputs.marker_summary import MarkerSummary, reduce_markers
from toolkit.telemetry.report.inputs.phase_markers import collective_waits, pair_phases
from toolkit.telemetry.report.inputs.rank_markers import PHASE_BEGIN, PHASE_END, STEP_BEGIN
from toolkit.telemetry.report.inputs.spans import SpanPart

T0_S = 1_800_000_000.0


class Clock:
    """The markers' clock, moved by the test."""

    def __init__(self) -> None:
        self.now_s = T0_S

    def at(self, t_s: float) -> Clock:
        self.now_s = T0_S + t_s
        return self


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    found = Clock()
    monkeypatch.setattr(marker_module, "wall_s", lambda: found.now_s)
    monkeypatch.setattr(marker_module, "time", SimpleNamespace(monotonic=lambda: found.now_s))
    monkeypatch.setenv("RTK_NODE", "node1")
    return found


def writers(run_dir: Path, ranks: int) -> list[MarkerWriter]:
    return [MarkerWriter(run_dir, rank, rank, ranks, f"GPU-{rank}") for rank in range(ranks)]


def reduced(run_dir: Path, ranks: list[MarkerWriter]) -> MarkerSummary:
    for writer in ranks:
        writer.close()
    return reduce_markers(RunDir(run_dir).marker_files(), {"node1": 0.0}, {})


def test_a_rank_entering_backward_late_is_the_last_and_the_others_wait_for_it(
    tmp_path: Path, clock: Clock
) -> None:
    """Rank 2 enters backward 0.3 s late each step; all leave backward together at 1.0 s
    (the all-reduce). Rank 1 accumulates gradients: two backward calls, the last counts."""
    ranks = writers(tmp_path, 3)
    clock.at(0.0)
    for w in ranks:
        w.write("run_start", steps_from="auto")
    for step in range(3):
        base = 10.0 * step
        for r, w in enumerate(ranks):
            clock.at(base)
            w.write("step_begin", step)
            w.write("phase_begin", step, name="forward")
            clock.at(base + 0.2)
            w.write("phase_end", step, name="forward")
            if r == 1:  # an earlier micro-batch's backward: not the step's collective
                w.write("phase_begin", step, name="backward")
                clock.at(base + 0.25)
                w.write("phase_end", step, name="backward")
            clock.at(base + 0.3 + (0.3 if r == 2 else 0.0))
            w.write("phase_begin", step, name="backward")
            clock.at(base + 1.0)
            w.write("phase_end", step, name="backward")
            clock.at(base + 1.5)
            w.write("step_end", step, tokens=100)
    summary = reduced(tmp_path, ranks)
    waits = summary.waits
    assert waits is not None and waits.sources == ["backward"]
    assert sorted(set(waits.step.tolist())) == [0, 1, 2]
    for rank, expected_s in ((0, 0.3), (1, 0.3), (2, 0.0)):
        mine = waits.rank == rank
        assert waits.wait_s[mine] == pytest.approx([expected_s] * 3, abs=1e-6)
        # Each leaves at its backward's end; it arrived its wait before.
        assert waits.exit_s[mine] == pytest.approx([T0_S + 10.0 * s + 1.0 for s in range(3)])
    assert waits.devices == ["GPU-0", "GPU-1", "GPU-2"] and waits.nodes == ["node1"]
    # Rank 2 arrives last at every step's collective.
    for step in range(3):
        here = np.flatnonzero(waits.step == step)
        assert int(waits.rank[here[np.argmax(waits.enter_s[here])]]) == 2
    phases = summary.phases
    # --auto-steps: each rank's time between two steps is its "input" (2 gaps in 3 steps).
    assert phases is not None and phases.names == ["forward", "backward", "input"]
    assert len(phases) == 3 * 3 * 2 + 3 + 3 * 2  # rank 1's extra backward of every step
    inputs = phases.name == phases.names.index("input")
    assert sorted(phases.spans.step[inputs].tolist()) == [1, 1, 1, 2, 2, 2]
    assert summary.steps_from is not None and summary.steps_from.value == "auto"


def test_steps_with_barriers_keep_them_and_user_events_are_counted(
    tmp_path: Path, clock: Clock
) -> None:
    ranks = writers(tmp_path, 2)
    for r, w in enumerate(ranks):
        clock.at(0.0)
        w.write("run_start", steps_from="api" if r == 0 else "hf")
        for step in range(2):
            clock.at(10.0 * step)
            w.write("step_begin", step)
            w.write("phase_begin", step, name="backward")
            clock.at(10.0 * step + 1.0 + r)
            w.write("phase_end", step, name="backward")
            w.write("step_end", step)
            w.write("eval_done", step, loss=0.5)
            if step == 1:
                clock.at(10.0 * step + 4.0)
                w.write("barrier", step, wait_s=0.5 * (1 - r), group=None)
        w.write("phase_begin", None, name="checkpoint")  # never ended: the run died
    summary = reduced(tmp_path, ranks)
    waits = summary.waits
    assert waits is not None and waits.sources == ["barriers", "backward"]
    at_barrier = waits.step == 1
    assert waits.wait_s[at_barrier].tolist() == pytest.approx([0.5, 0.0])
    assert waits.backward is not None and not waits.backward[at_barrier].any()
    # Step 0 has no barrier: rank 0's backward took 1 s, rank 1's 2 s.
    assert waits.wait_s[~at_barrier].tolist() == pytest.approx([0.0, 1.0])
    assert summary.marks == {"eval_done": 4}
    assert summary.phases is not None and summary.phases.names == ["backward"]
    assert summary.steps_from is not None and summary.steps_from.value is None
    assert summary.steps_from.ranks == {"api": 1, "hf": 1}


def test_phases_pair_by_name_in_file_order() -> None:
    # outer begin, forward begin, forward end, backward end (stray), outer end, forward begin
    event = np.array([PHASE_BEGIN, PHASE_BEGIN, PHASE_END, PHASE_END, PHASE_END, STEP_BEGIN])
    event = np.append(event, PHASE_BEGIN)
    label = np.array([0, 1, 1, 2, 0, -1, 1])
    step = np.array([-1, 4, 4, 4, 5, 5, 5])
    has_step = step >= 0
    pairs = pair_phases(event, label, step, has_step)
    assert pairs.begin.tolist() == [0, 1] and pairs.end.tolist() == [4, 2]
    # The outer phase has no step at its begin: its end's.
    assert pairs.step.tolist() == [5, 4] and pairs.has_step.all()


def test_the_shortest_backward_waits_nothing() -> None:
    def part(rank: int, begin: list[float], end: list[float]) -> SpanPart:
        n = len(begin)
        return SpanPart(
            step=np.arange(n, dtype=np.int64),
            rank=rank,
            node=np.zeros(n, dtype=np.int64),
            device=np.zeros(n, dtype=np.int64),
            enter_s=np.array(begin),
            exit_s=np.array(end),
            names=["n"],
            gpus=[None],
        )

    parts = [part(0, [0.0, 10.0], [1.0, 11.0]), part(1, [0.5, 10.0], [1.0, 11.5])]
    out = collective_waits(parts, barrier_steps=np.array([1]))
    assert [p.step.tolist() for p in out] == [[0], [0]]
    assert out[0].exit_s.tolist() == [1.0] and out[0].enter_s.tolist() == pytest.approx([0.5])
    assert out[1].enter_s.tolist() == pytest.approx([1.0])
