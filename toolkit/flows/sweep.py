"""Run a sweep: every run of an experiment, each in its own run directory, resumable.

For each run, in order (grouped by node count, so the cluster is brought up once per
count): bring the cluster to the run's node count, apply its GPU settings (restored
afterwards, also on failure or Ctrl-C), run the workload as a Ray job with telemetry,
an idle baseline before it and a cooldown after it, build its report, and write
``profile_run.json``. A run whose ``profile_run.json`` says ``succeeded`` is skipped
when the sweep runs again; a failed run is recorded as failed and the sweep goes on.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from toolkit.cluster.plan import build_plan
from toolkit.cluster.progress_reporter import Reporter
from toolkit.errors import ExperimentError, Problem, RtkError, RunDirError
from toolkit.flows import JobRequest, PreflightPolicy, Session, job_request
from toolkit.inventory import Inventory, load_inventory
from toolkit.profile.experiment import Experiment, train_config
from toolkit.profile.run_spec import GpuRequest, RunSpec
from toolkit.rundir import IdleRecord, ProfileRunRecord, RunDir
from toolkit.telemetry.options import TelemetryOptions
from toolkit.workloads import CommandWorkload, TrainWorkload, VllmWorkload, Workload

Echo = Callable[[str], None]


@dataclass
class SweepOutcome:
    """What one invocation of the sweep did."""

    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def run_dir_of(experiment: Experiment, run: RunSpec) -> Path:
    """Where a run's directory is (the same path on the head and here)."""
    return experiment.sweep_dir / "runs" / run.dir_name


def finished(experiment: Experiment, run: RunSpec) -> bool:
    """True when the run already succeeded in an earlier invocation."""
    try:
        record = ProfileRunRecord.read(RunDir(run_dir_of(experiment, run)).profile_run)
    except RunDirError:
        return False
    return record.status == "succeeded"


def subset(inventory: Inventory, count: int) -> Inventory:
    """The inventory's first ``count`` nodes, the head among them.

    Raises:
        ExperimentError: The inventory has fewer nodes.
    """
    if count > len(inventory.nodes):
        raise ExperimentError(
            [
                Problem(
                    inventory.source,
                    None,
                    "nodes",
                    f"the sweep asks for {count} nodes; the inventory has {len(inventory.nodes)}",
                )
            ]
        )
    ordered = [inventory.head, *inventory.workers]
    return dataclasses.replace(inventory, nodes=tuple(ordered[:count]), min_nodes=count)


@dataclass(frozen=True)
class PlannedRun:
    """One run a sweep would do: its cluster size, the GPU settings it asks for, its job.

    Attributes:
        run_id: The run's id.
        nodes: How many of the inventory's nodes it runs on.
        gpu_settings: The GPU settings applied for its job.
        gpu_axes: Those settings as the experiment wrote them (what ``render`` shows).
        job: The Ray job it submits.
    """

    run_id: str
    nodes: int
    gpu_settings: GpuRequest
    gpu_axes: str
    job: JobRequest


@dataclass(frozen=True)
class SweepPlan:
    """The runs a sweep would do, in order (``rtk profile --dry-run``)."""

    name: str
    sweep_dir: Path
    runs: list[PlannedRun]
    skipped: list[str]

    def render(self) -> str:
        """The plan as text."""
        lines = [
            f"sweep {self.name!r} in {self.sweep_dir}: {len(self.runs)} run(s) to do, "
            f"{len(self.skipped)} finished earlier and skipped"
        ]
        for run in self.runs:
            settings = run.gpu_axes
            lines.append(
                f"run {run.run_id}: {run.nodes} node(s)" + (f"; {settings}" if settings else "")
            )
            lines += [f"  {line}" for line in run.job.render().splitlines()]
        return "\n".join(lines) + "\n"


def plan_sweep(experiment: Experiment, max_runs: int | None = None) -> SweepPlan:
    """What ``run_sweep`` would do now (pure: reads the sweep directory, touches no node)."""
    inventory = load_inventory(experiment.inventory_path)
    runs: list[PlannedRun] = []
    skipped: list[str] = []
    for run in experiment.runs():
        if finished(experiment, run):
            skipped.append(run.run_id)
            continue
        if max_runs is not None and len(runs) >= max_runs:
            break
        count = run.nodes if run.nodes is not None else len(inventory.nodes)
        plan = build_plan(subset(inventory, count))
        job = job_request(plan, workload_of(experiment, run, str(run_dir_of(experiment, run))))
        runs.append(PlannedRun(run.run_id, count, run.gpu, run.gpu_axes, job))
    return SweepPlan(experiment.spec.name, experiment.sweep_dir, runs, skipped)


def run_sweep(
    experiment: Experiment,
    reporter: Reporter,
    echo: Echo,
    max_runs: int | None = None,
    keep_cluster: bool = False,
) -> SweepOutcome:
    """Run every unfinished run of the sweep (at most ``max_runs`` of them)."""
    inventory = load_inventory(experiment.inventory_path)
    experiment.sweep_dir.mkdir(parents=True, exist_ok=True)
    _write_sweep_file(experiment)
    outcome = SweepOutcome()
    current: Session | None = None
    with Session(inventory, reporter, echo) as session:
        try:
            for run in experiment.runs():
                if finished(experiment, run):
                    outcome.skipped.append(run.run_id)
                    continue
                if max_runs is not None and len(outcome.ran) >= max_runs:
                    break
                count = run.nodes if run.nodes is not None else len(inventory.nodes)
                if current is None or len(current.plan.nodes) != count:
                    if current is not None:
                        current.tear_down()
                    current = session.subset(subset(inventory, count))
                    reporter.info(f"bringing the cluster up on {count} node(s)")
                    current.bring_up(PreflightPolicy.SKIP)
                echo(f"rtk profile: run {run.run_id} ({len(outcome.ran) + 1} this time)")
                ok = _run_one(experiment, run, current, echo)
                outcome.ran.append(run.run_id)
                if not ok:
                    outcome.failed.append(run.run_id)
        finally:
            if current is not None and not keep_cluster:
                current.tear_down()
    return outcome


def _run_one(experiment: Experiment, run: RunSpec, session: Session, echo: Echo) -> bool:
    """One run, recorded in its ``profile_run.json``; False when it failed."""
    from toolkit.gpu.settings import gpu_settings

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


def workload_of(experiment: Experiment, run: RunSpec, run_dir: str) -> Workload:
    """The workload of one run: the trainer, vLLM's benchmark or a command, with telemetry."""
    spec = experiment.spec
    workload = spec.workload
    telemetry = TelemetryOptions(baseline_s=spec.baseline_s, cooldown_max_s=spec.cooldown_max_s)
    if workload.train is not None:
        idle = {"baseline_s": telemetry.baseline_s, "cooldown_max_s": telemetry.cooldown_max_s}
        options = {**experiment.train_options(run.axes), **idle}
        config = train_config(run_dir, options).check()
        return TrainWorkload(config, Path(run_dir).name)
    env = {f"RTK_AXIS_{k.upper()}": json.dumps(v) for k, v in run.axes.items()}
    if workload.vllm is not None:
        settings = {**workload.vllm.model_dump(), **run.axes}
        return VllmWorkload(settings, run_dir, telemetry, workload.working_dir, env)
    argv = tuple(workload.command or [])
    return CommandWorkload(argv, workload.working_dir, env, run_dir, telemetry)


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
