"""Run a sweep: the steps ``flows.sweep_plan`` planned, in order, each run resumable.

A run applies its GPU settings (put back afterwards, also on failure or Ctrl-C), runs
the workload as a Ray job with telemetry, an idle baseline before it and a cooldown
after it, builds its report, and writes ``profile_run.json``. A run whose
``profile_run.json`` says ``succeeded`` is not planned when the sweep runs again; a
failed run is recorded as failed and the sweep goes on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from toolkit.cluster.progress_reporter import Reporter
from toolkit.errors import RtkError, RunDirError
from toolkit.flows.outcome import PreflightPolicy
from toolkit.flows.session import Session
from toolkit.flows.sweep_plan import (
    SweepPlan,
    SweepStep,
    SweepStepKind,
    run_dir_of,
    subset,
    workload_of,
)
from toolkit.profile.experiment import Experiment
from toolkit.profile.run_spec import RunSpec
from toolkit.rundir import IdleRecord, ProfileRunRecord, RunDir

Echo = Callable[[str], None]


@dataclass
class SweepOutcome:
    """What one invocation of the sweep did: the runs, and every step taken, in order."""

    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    steps: list[SweepStep] = field(default_factory=list)


def run_sweep(
    experiment: Experiment, plan: SweepPlan, reporter: Reporter, echo: Echo
) -> SweepOutcome:
    """Take ``plan``'s steps (``plan_sweep``) in order.

    A run that fails is recorded and the sweep goes on. On Ctrl-C or an error the
    cluster up is still taken down when the plan takes it down at its end.
    """
    experiment.sweep_dir.mkdir(parents=True, exist_ok=True)
    _write_sweep_file(experiment)
    outcome = SweepOutcome(skipped=list(plan.skipped))
    current: Session | None = None
    last_down = plan.steps[-1] if plan.steps and plan.steps[-1].kind is SweepStepKind.DOWN else None
    with Session(plan.inventory, reporter, echo) as session:
        try:
            for step in plan.steps:
                if step.kind is SweepStepKind.UP:
                    current = session.subset(subset(plan.inventory, step.nodes))
                    reporter.info(f"bringing the cluster up on {step.nodes} node(s)")
                    current.bring_up(PreflightPolicy.SKIP)
                elif step.kind is SweepStepKind.DOWN:
                    assert current is not None
                    current.tear_down()
                    current = None
                else:
                    assert current is not None and step.run is not None
                    run = step.run.spec
                    echo(f"rtk profile: run {run.run_id} ({len(outcome.ran) + 1} this time)")
                    ok = _run_one(experiment, run, current, echo)
                    outcome.ran.append(run.run_id)
                    if not ok:
                        outcome.failed.append(run.run_id)
                outcome.steps.append(step)
        finally:
            if current is not None and last_down is not None:
                current.tear_down()
                if outcome.steps[-1:] != [last_down]:
                    outcome.steps.append(last_down)
    return outcome


def _run_one(experiment: Experiment, run: RunSpec, session: Session, echo: Echo) -> bool:
    """One run, recorded in its ``profile_run.json``; False when it failed."""
    from toolkit.gpu.limits_over_ssh import gpu_settings

    run_dir = run_dir_of(experiment, run)
    run_dir.mkdir(parents=True, exist_ok=True)
    layout = RunDir(run_dir)
    record = ProfileRunRecord(
        run_id=run.run_id,
        config_id=run.config_id,
        axes=dict(run.axes),
        repeat=run.repeat,
        status="running",
        run_dir=str(run_dir),
        started_wall_s=time.time(),
    )
    record.write(layout.profile_run)
    try:
        with gpu_settings(
            session.plan,
            session.transport,
            power_limit_w=run.gpu.power_limit_w,
            gpu_clocks_mhz=run.gpu.gpu_clocks_mhz,
            mem_clocks_mhz=run.gpu.mem_clocks_mhz,
        ) as applied:
            if applied:
                record = replace(record, gpu_settings=applied)
            job = session.run_workload(workload_of(experiment, run, str(run_dir))).job
        _report(session, run_dir)
        if not job.ok:
            raise RtkError(f"job {job.job_id} {job.status}: {job.message.strip()[:300]}")
        record = replace(record, status="succeeded")
    except RtkError as e:
        record = replace(record, status="failed", error=str(e))
        echo(f"rtk profile: run {run.run_id} FAILED: {e}")
    except BaseException:
        record = replace(record, status="interrupted", error="stopped before its end")
        raise
    finally:
        idle = _read_idle(layout)
        record = replace(
            record, ended_wall_s=time.time(), baseline=idle.baseline, cooldown=idle.cooldown
        )
        record.write(layout.profile_run)
    return record.status == "succeeded"


def _report(session: Session, run_dir: Path) -> None:
    """Build the run's report here, bringing its results from the head if needed."""
    collected = session.collect(str(run_dir))
    if collected.error is not None:
        raise collected.error
    if collected.path is None:
        raise RtkError(f"cannot write {run_dir} here for the run's results")
    reported = session.report(collected)
    if reported.error is not None:
        raise reported.error


def _write_sweep_file(experiment: Experiment) -> None:
    text = {
        "name": experiment.spec.name,
        "source": experiment.source,
        "inventory": str(experiment.inventory_path),
        "experiment": experiment.spec.model_dump(),
        "runs": [r.run_id for r in experiment.runs()],
    }
    (experiment.sweep_dir / "sweep.json").write_text(json.dumps(text, indent=2) + "\n")


def _read_idle(layout: RunDir) -> IdleRecord:
    """The run's idle phases; none when it has no (readable) ``idle.json``."""
    try:
        return IdleRecord.read(layout.idle)
    except RunDirError:
        return IdleRecord()
