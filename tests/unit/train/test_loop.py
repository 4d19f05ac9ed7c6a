"""The trainer's loop on local gloo ranks: learning, markers, checkpoints, exact resume."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

# A plain import: without torch this module fails to load (in CI too), never skips.
import torch  # noqa: F401
from conftest import require

from toolkit.errors import RtkError
from toolkit.rundir import RunDir, read_markers
from toolkit.train.config import PRESETS, TrainConfig
from toolkit.train.local_processes import run_local


def metrics(run_dir: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def config(run_dir: Path, **changes: object) -> TrainConfig:
    base = TrainConfig(
        run_dir=str(run_dir),
        model_size="tiny",
        batch_size=4,
        max_steps=20,
        barrier_every=5,
        save_steps=10,
        keep_checkpoints=3,
        seed=3,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2", "deepspeed"])
def test_learns_marks_barriers_and_resumes_exactly(strategy: str, tmp_path: Path) -> None:
    if strategy == "deepspeed":
        require(
            find_spec("deepspeed") is not None,
            "deepspeed is not installed (pip install '.[deepspeed]')",
        )
    straight = tmp_path / "straight"
    run_local(config(straight, strategy=strategy, max_steps=30), 2, tmp_path / "rv1")
    # The same run as if it had died after step 30 but before its last checkpoint: a
    # copy without step 30's checkpoint resumes at 21, and its steps 21-30 must be the
    # straight run's (two launches, not three: a run to 20 then a resume).
    split = tmp_path / "split"
    shutil.copytree(straight, split)
    shutil.rmtree(split / "checkpoints" / "step-00030")
    run_local(config(split, strategy=strategy, max_steps=30, resume=True), 2, tmp_path / "rv2")

    steps = [m["step"] for m in metrics(split)]
    assert steps == list(range(1, 31))  # nothing repeated, nothing skipped
    superseded = (split / "metrics.superseded.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in superseded] == list(range(21, 31))
    first, last = metrics(straight)[0]["loss"], metrics(straight)[-1]["loss"]
    assert last < 0.6 * first, (first, last)
    # The resumed run is the same run: same data position, optimizer and weights.
    resumed = {m["step"]: m["loss"] for m in metrics(split)}
    for m in metrics(straight)[20:]:
        assert resumed[m["step"]] == pytest.approx(m["loss"], rel=1e-4, abs=1e-5)

    records = read_markers(straight)
    for rank in (0, 1):
        mine = [r for r in records if r.rank == rank]
        assert [r.step for r in mine if r.event == "barrier"] == [5, 10, 15, 20, 25, 30]
        assert [r.step for r in mine if r.event == "step_end"] == list(range(1, 31))
        assert all(r.wall_s > 0 and r.mono_s > 0 for r in mine)
        assert {r.node for r in mine} == {f"local{rank}"}
    kept = sorted(p.name for p in (straight / "checkpoints").iterdir())
    assert kept == ["step-00010", "step-00020", "step-00030"]


def test_byte_text_data_trains(tmp_path: Path) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    run_dir = tmp_path / "run"
    run_local(
        config(run_dir, data=str(text), max_steps=25, save_steps=0, barrier_every=0),
        1,
        tmp_path / "rv",
    )
    losses = [m["loss"] for m in metrics(run_dir)]
    assert losses[-1] < 0.7 * losses[0]


def test_presets_have_the_sizes_they_are_named_for() -> None:
    assert PRESETS["125M"].params == pytest.approx(125e6, rel=0.1)
    assert PRESETS["350M"].params == pytest.approx(350e6, rel=0.1)
    assert PRESETS["1.3B"].params == pytest.approx(1.3e9, rel=0.1)
    assert PRESETS["8B"].params == pytest.approx(8e9, rel=0.1)


def test_steps_of_a_failed_attempt_move_aside_on_restart(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_local(config(run, max_steps=20), 1, tmp_path / "rv1")
    # The attempt that trained 21-23 died before its next checkpoint; the line for 23
    # was cut short by the crash.
    with (run / "metrics.jsonl").open("a") as f:
        for step in (21, 22):
            f.write(json.dumps({"step": step, "loss": 9.0}) + "\n")
        f.write('{"step": 2')
    run_local(config(run, max_steps=25, resume=True), 1, tmp_path / "rv2")
    assert [m["step"] for m in metrics(run)] == list(range(1, 26))
    assert all(m["loss"] != 9.0 for m in metrics(run))
    superseded = (run / "metrics.superseded.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in superseded] == [21, 22]


def test_straggle_makes_one_rank_arrive_last_at_every_barrier(tmp_path: Path) -> None:
    """``--straggle 1:S``: rank 1 sleeps S before every barrier, and the report names it.

    Both ranks leave the step's loss all-reduce together; rank 0 then goes straight
    to the barrier, rank 1 after its sleep. S is a second, far beyond scheduling noise
    on a loaded machine, and only the order is asserted: rank 1 arrives last and
    waits less. How close rank 0's wait comes to S is a benchmark
    (``benchmarks/timing_targets.py straggle``).
    """
    from toolkit.telemetry.report.figures.stragglers import WaitEnergy, stragglers
    from toolkit.telemetry.report.inputs.marker_summary import reduce_markers

    run_dir = tmp_path / "run"
    run_local(
        config(run_dir, max_steps=6, barrier_every=2, save_steps=0, straggle="1:1.0"),
        2,
        tmp_path / "rendezvous",
    )
    barriers = {(r.rank, r.step): r for r in read_markers(run_dir) if r.event == "barrier"}
    assert sorted(barriers) == [(rank, step) for rank in (0, 1) for step in (2, 4, 6)]
    for step in (2, 4, 6):
        wait_s = {rank: float(str(barriers[(rank, step)].fields["wait_s"])) for rank in (0, 1)}
        entered_s = {rank: barriers[(rank, step)].mono_s - wait_s[rank] for rank in (0, 1)}
        assert wait_s[0] > wait_s[1], wait_s  # rank 0 waited for the sleeper ...
        assert entered_s[1] > entered_s[0], entered_s  # ... who arrived last (one clock)
    summary = reduce_markers(sorted((run_dir / "markers").glob("*.jsonl")), {}, {})
    assert summary.waits is not None
    found = stragglers(summary.waits, WaitEnergy(summary.waits), 0.0)
    assert found is not None and found.slowest is not None
    assert (found.slowest.rank, found.slowest.last, found.barriers) == (1, 3, 3)


def test_straggle_must_be_rank_and_seconds() -> None:
    with pytest.raises(RtkError, match="--straggle 'x': give RANK:SECONDS"):
        TrainConfig(run_dir="r", straggle="x").check()


def test_a_stop_request_ends_every_rank_at_one_step_with_a_checkpoint(tmp_path: Path) -> None:
    """What an sbatch job's teardown causes: SIGINT to the driver writes the request."""
    run = tmp_path / "run"
    cfg = config(run, max_steps=400, save_steps=0, barrier_every=0, checkpoint_on_stop=True)

    ended = threading.Event()

    def ask_once_training() -> None:
        # However long the ranks take to start (a loaded machine), ask once five steps
        # are done; give up only when the run has ended on its own.
        while not ended.is_set():
            if (run / "metrics.jsonl").exists() and len(metrics(run)) >= 5:
                RunDir(run).stop_request.write_text("{}")
                return
            time.sleep(0.01)

    asker = threading.Thread(target=ask_once_training)
    asker.start()
    try:
        run_local(cfg, 2, tmp_path / "rv1")
    finally:
        ended.set()
        asker.join()
    stopped_at = len(metrics(run))
    assert 5 <= stopped_at < 400
    records = read_markers(run)
    stops = {(r.rank, r.step) for r in records if r.event == "stop"}
    assert stops == {(0, stopped_at), (1, stopped_at)}  # both ranks, the same step
    assert not [r for r in records if r.event == "run_end"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [f"step-{stopped_at:05d}"]
    # The next attempt (its driver removes the request first) trains on from there.
    RunDir(run).stop_request.unlink()
    run_local(dataclasses.replace(cfg, max_steps=stopped_at + 5), 2, tmp_path / "rv2")
    assert [m["step"] for m in metrics(run)] == list(range(1, stopped_at + 6))


def test_a_run_without_checkpoints_on_stop_ignores_the_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "500")  # as rtk's jobs set it
    run = tmp_path / "run"
    run.mkdir()
    RunDir(run).stop_request.write_text("{}")
    run_local(config(run, max_steps=3, save_steps=0, barrier_every=0), 1, tmp_path / "rv")
    assert [m["step"] for m in metrics(run)] == [1, 2, 3]
    assert [r.step for r in read_markers(run) if r.event == "run_end"] == [3]
    # The rank's Flight Recorder answered a stall's ask: it said it watches.
    assert json.loads(RunDir(run).flight_dump(0).read_text()) == {"request": None}
