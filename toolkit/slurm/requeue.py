"""The end of one allocation of a ``--requeue`` job: requeue it or not, and record it.

Mechanism: ``scontrol requeue $SLURM_JOB_ID`` from the job's own teardown, not a
dependent resubmission. The job keeps its id, so its run directory
(``<job name>-<job id>``), its log (``--open-mode=append``) and the ports rtk derives
from the id stay the same, SLURM counts the allocations (``SLURM_RESTART_COUNT``), and
``squeue``/``scancel`` see one job throughout. SLURM holds a requeued job for its
credential lifetime before it may start again (``AuthInfo=cred_expire``, 120 s by
default). The price: the teardown must have finished before the call, as SLURM ends
the allocation at once (this module ignores SIGTERM meanwhile, so the record is
written).

The decision (``decide``) reads the run directory, not the step's exit status: a run
that reached ``max_steps`` as the time-limit warning came is done, whatever status
the stopped step returned.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from toolkit.errors import SlurmError
from toolkit.rundir import (
    AllocationRecord,
    RunDir,
    TrainingProgress,
    read_allocations,
    training_progress,
)

# What ended an allocation that may be requeued: SIGUSR1, the time-limit warning
# (--signal=B:USR1@GRACE). Not SIGTERM, which scancel sends too (a cancelled job must
# stay cancelled; SLURM requeues preempted jobs itself under PreemptMode=REQUEUE), nor
# SIGINT, the user's clean stop.
REQUEUE_ON = ("USR1",)
ENDED_BY = ("USR1", "TERM", "INT", "end")
REQUEUE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RequeueDecision:
    """Whether this allocation requeues the job, and why, in words."""

    requeue: bool
    reason: str


@dataclass(frozen=True)
class Allocation:
    """The allocation that is ending, as the job script knows it.

    Attributes:
        job_id: ``SLURM_JOB_ID``.
        restart_count: ``SLURM_RESTART_COUNT`` (0 in the first allocation).
        nodes: ``SLURM_JOB_NODELIST``.
        started_wall_s: When the job script started in this allocation.
        ended_by: ``USR1``, ``TERM``, ``INT`` or ``end`` (``ENDED_BY``).
    """

    job_id: str
    restart_count: int
    nodes: str
    started_wall_s: float | None
    ended_by: str


def decide(
    progress: TrainingProgress,
    allocation: Allocation,
    max_restarts: int,
    steps_before: int | None,
) -> RequeueDecision:
    """Requeue when the time limit stopped a run short of its end and restarts remain.

    Args:
        progress: How far the run got (``training_progress``).
        allocation: The allocation that is ending.
        max_restarts: Requeues allowed in all (``--max-restarts``).
        steps_before: The last step when the previous allocation ended; None in the
            first. An allocation that trained no step would not do better next time.
    """
    where = f"step {progress.last_step} of {progress.max_steps or '?'}"
    if progress.done:
        return RequeueDecision(False, f"the run is done ({where})")
    if allocation.ended_by not in REQUEUE_ON:
        why = "by itself" if allocation.ended_by == "end" else f"on SIG{allocation.ended_by}"
        return RequeueDecision(
            False,
            f"the job ended {why}, not at its time limit ({where}): not requeueing; "
            "a failed or cancelled run is not retried",
        )
    if progress.max_steps is None:
        return RequeueDecision(
            False,
            "training never started (no train_config.json in the run directory): "
            "not requeueing; give the job a longer --time",
        )
    if steps_before is not None and progress.last_step <= steps_before:
        return RequeueDecision(
            False,
            f"no step trained in this allocation ({where}, as before it): not requeueing; "
            "give the job a longer --time",
        )
    if allocation.restart_count >= max_restarts:
        return RequeueDecision(
            False,
            f"{where}, and {allocation.restart_count} of {max_restarts} restart(s) used: "
            "not requeueing; submit again with --run-id to continue from the checkpoint",
        )
    return RequeueDecision(
        True,
        f"{where} at the time limit: requeued (restart {allocation.restart_count + 1} of "
        f"{max_restarts}); the next allocation resumes from the checkpoint",
    )


def requeue_job(job_id: str, scontrol: str = "scontrol") -> None:
    """``scontrol requeue JOB_ID``.

    Raises:
        SlurmError: scontrol is not on PATH, refused, or did not answer.
    """
    exe = shutil.which(scontrol)
    if exe is None:
        raise SlurmError(f"{scontrol} is not on PATH: cannot requeue job {job_id}")
    try:
        done = subprocess.run(
            [exe, "requeue", job_id],
            capture_output=True,
            text=True,
            timeout=REQUEUE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise SlurmError(
            f"scontrol requeue {job_id} did not answer in {REQUEUE_TIMEOUT_S:g} s"
        ) from e
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        raise SlurmError(f"scontrol requeue {job_id} refused: {why}")


def end_allocation(
    run_dir: RunDir,
    allocation: Allocation,
    max_restarts: int,
    requeue: Callable[[str], None] = requeue_job,
) -> AllocationRecord:
    """Decide, requeue the job when that is the decision, and record the allocation.

    The record is appended to ``RUN_DIR/allocations.jsonl`` whatever the decision,
    with SIGTERM ignored until it is written: requeueing ends the allocation, and
    SLURM's SIGTERM must not cut the record short.

    Raises:
        RunDirError: The run directory's trainer options are unreadable.
    """
    progress = training_progress(run_dir)
    records = [r for r in read_allocations(run_dir.allocations) if isinstance(r, AllocationRecord)]
    steps_before = records[-1].last_step if records else None
    decision = decide(progress, allocation, max_restarts, steps_before)
    with _sigterm_ignored():
        if decision.requeue:
            try:
                requeue(allocation.job_id)
            except SlurmError as e:
                decision = RequeueDecision(False, f"the job could not requeue itself: {e}")
        record = AllocationRecord(
            job_id=allocation.job_id,
            restart_count=allocation.restart_count,
            nodes=allocation.nodes,
            started_wall_s=allocation.started_wall_s,
            ended_wall_s=time.time(),
            ended_by=allocation.ended_by,
            last_step=progress.last_step,
            max_steps=progress.max_steps,
            requeued=decision.requeue,
            reason=decision.reason,
        )
        record.append_to(run_dir.allocations)
    return record


@contextlib.contextmanager
def _sigterm_ignored() -> Iterator[None]:
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
