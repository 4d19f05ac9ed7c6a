"""rtk sbatch --requeue: options, the rendered lines, and the decision at an allocation's end.

The decision reads a real run directory (metrics.jsonl, train_config.json,
allocations.jsonl); ``scontrol`` cannot run here, so the requeue itself is a function
that records its calls (the SLURM sandbox's test runs the real one).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import rtk

from toolkit.cli import cli
from toolkit.errors import SlurmError
from toolkit.inventory import load_inventory
from toolkit.rundir import (
    AllocationRecord,
    RunDir,
    TrainConfigRecord,
    TrainingProgress,
    read_allocations,
    training_progress,
)
from toolkit.slurm.batch_options import DEFAULT_MAX_RESTARTS, SbatchOptionError, merge_options
from toolkit.slurm.requeue import Allocation, decide, end_allocation
from toolkit.slurm.sbatch_script import render_script

INVENTORY = "cluster: plain\nnodes:\n  - host: cpu[1-2]\n"


@pytest.fixture
def inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "plain.yaml"
    path.write_text(INVENTORY)
    monkeypatch.chdir(tmp_path)
    return path


def allocation(ended_by: str = "USR1", restart_count: int = 0) -> Allocation:
    return Allocation("4242", restart_count, "cpu[1-2]", 1_700_000_000.0, ended_by)


def run_dir(tmp_path: Path, last_step: int, max_steps: int | None = 100) -> RunDir:
    run = RunDir(tmp_path / "run")
    run.root.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": s, "loss": 1.0}) for s in range(1, last_step + 1)]
    run.metrics.write_text("".join(f"{line}\n" for line in lines))
    if max_steps is not None:
        TrainConfigRecord({"max_steps": max_steps, "run_dir": str(run.root)}).write(
            run.train_config
        )
    return run


# --- options ---------------------------------------------------------------------------


def test_requeue_alone_allows_the_default_restarts_and_max_restarts_alone_implies_it(
    inventory: Path,
) -> None:
    inv = load_inventory(str(inventory))
    assert merge_options(inv, {}).max_restarts == 0
    alone = merge_options(inv, {"requeue": True})
    assert alone.requeue and alone.max_restarts == DEFAULT_MAX_RESTARTS > 0
    assert merge_options(inv, {"max_restarts": 5}).requeue
    off = merge_options(inv, {"requeue": True, "max_restarts": 0})
    assert (off.requeue, off.max_restarts) == (False, 0)


def test_negative_max_restarts_is_a_usage_error(inventory: Path) -> None:
    with pytest.raises(SbatchOptionError) as caught:
        merge_options(load_inventory(str(inventory)), {"max_restarts": -1})
    assert caught.value.exit_code == 2
    assert "--max-restarts: got -1; give 0 (no requeue) or more" in str(caught.value)
    done = rtk("sbatch", "render", str(inventory), "--template", "train", "--max-restarts", "-2")
    assert done.returncode == 2 and done.stderr.startswith("rtk: --max-restarts: got -2")


def test_requeue_lines_are_rendered_only_with_requeue(inventory: Path) -> None:
    inv = load_inventory(str(inventory))
    options = merge_options(inv, {"requeue": True, "time": "60"})
    script = render_script("train", INVENTORY, "plain.yaml", options, ("--max-steps", "9"))
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert directives[-3:] == [
        "#SBATCH --signal=B:USR1@180",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
    ]
    assert f"RTK_MAX_RESTARTS={DEFAULT_MAX_RESTARTS}\n" in script  # --requeue's default
    assert '--run-id "$RTK_RUN_ID" --checkpoint-on-stop --max-steps 9' in script
    teardown = script[script.index("rtk_teardown() {") :]
    assert teardown.index("rtk_report\n") < teardown.index("rtk_requeue\n")
    plain = render_script("train", INVENTORY, "plain.yaml", merge_options(inv, {}))
    assert "requeue" not in plain and "checkpoint-on-stop" not in plain


def test_requeue_is_refused_for_the_cluster_template(inventory: Path) -> None:
    options = merge_options(load_inventory(str(inventory)), {"requeue": True})
    with pytest.raises(SbatchOptionError, match="only --template train requeues itself"):
        render_script("cluster", INVENTORY, "plain.yaml", options, ("python", "x.py"))
    done = rtk("sbatch", "render", str(inventory), "--requeue")
    assert done.returncode == 2 and "the cluster template cannot tell" in done.stderr
    done = rtk("sbatch", "render", str(inventory), "--template", "train", "--sbatch-arg=--requeue")
    assert (
        done.returncode == 2 and "rtk writes --requeue itself; use rtk's --requeue" in done.stderr
    )


def test_submit_help_explains_requeue() -> None:
    done = CliRunner().invoke(cli, ["sbatch", "submit", "--help"])
    assert done.exit_code == 0
    for text in ("--requeue", "--max-restarts", "scontrol requeue", "allocations.jsonl"):
        assert text in done.output


# --- the decision ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("progress", "ended_by", "restarts", "before", "requeue", "why"),
    [
        (TrainingProgress(40, 100), "USR1", 0, None, True, "requeued (restart 1 of 3)"),
        (TrainingProgress(80, 100), "USR1", 2, 40, True, "requeued (restart 3 of 3)"),
        (TrainingProgress(90, 100), "USR1", 3, 80, False, "3 of 3 restart(s) used"),
        (TrainingProgress(100, 100), "USR1", 0, None, False, "the run is done"),
        (TrainingProgress(40, 100), "TERM", 0, None, False, "ended on SIGTERM"),
        (TrainingProgress(40, 100), "INT", 0, None, False, "ended on SIGINT"),
        (TrainingProgress(40, 100), "end", 0, None, False, "ended by itself"),
        (TrainingProgress(0, None), "USR1", 0, None, False, "training never started"),
        (TrainingProgress(40, 100), "USR1", 1, 40, False, "no step trained in this allocation"),
    ],
)
def test_decide(
    progress: TrainingProgress,
    ended_by: str,
    restarts: int,
    before: int | None,
    requeue: bool,
    why: str,
) -> None:
    decision = decide(progress, allocation(ended_by, restarts), 3, before)
    assert decision.requeue is requeue
    assert why in decision.reason


def test_progress_reads_the_last_whole_metrics_line(tmp_path: Path) -> None:
    run = run_dir(tmp_path, 7, 50)
    with run.metrics.open("a") as f:
        f.write('{"step": 8, "lo')  # cut short by a kill
    assert training_progress(run) == TrainingProgress(7, 50)
    assert training_progress(RunDir(tmp_path / "empty")) == TrainingProgress(0, None)


def test_an_allocation_requeues_once_per_allocation_and_records_each(tmp_path: Path) -> None:
    run = run_dir(tmp_path, 30)
    requeued: list[str] = []
    first = end_allocation(run, allocation(), 3, requeued.append)
    assert requeued == ["4242"] and first.requeued
    assert (first.last_step, first.max_steps, first.ended_by) == (30, 100, "USR1")
    # The next allocation trained nothing (its time went on bringing Ray up).
    second = end_allocation(run, allocation(restart_count=1), 3, requeued.append)
    assert requeued == ["4242"] and not second.requeued
    assert "no step trained in this allocation" in second.reason
    records = [r for r in read_allocations(run.allocations) if isinstance(r, AllocationRecord)]
    assert [(r.restart_count, r.requeued) for r in records] == [(0, True), (1, False)]


def test_a_refused_requeue_is_recorded_as_not_requeued(tmp_path: Path) -> None:
    run = run_dir(tmp_path, 30)

    def refuse(job_id: str) -> None:
        raise SlurmError(f"scontrol requeue {job_id} refused: Job is no longer pending")

    record = end_allocation(run, allocation(), 3, refuse)
    assert not record.requeued
    assert "could not requeue itself: scontrol requeue 4242 refused" in record.reason
    assert list(read_allocations(run.allocations)) == [record]


def test_cli_records_an_allocation_that_ended_by_itself(tmp_path: Path) -> None:
    run = run_dir(tmp_path, 100)
    done = CliRunner().invoke(
        cli,
        [
            *("sbatch", "requeue", str(run.root), "--job-id", "4242", "--restart-count", "1"),
            *("--max-restarts", "3", "--ended-by", "end", "--nodes", "cpu[1-2]"),
        ],
    )
    assert done.exit_code == 0, done.output
    assert "rtk: job 4242: the run is done (step 100 of 100)" in done.output
    (record,) = read_allocations(run.allocations)
    assert isinstance(record, AllocationRecord)
    assert (record.restart_count, record.nodes, record.started_wall_s) == (1, "cpu[1-2]", None)
    bad = CliRunner().invoke(
        cli, ["sbatch", "requeue", str(run.root), "--job-id", "1", "--max-restarts", "-1"]
    )
    assert bad.exit_code == 2
