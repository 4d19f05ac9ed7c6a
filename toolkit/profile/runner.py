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

from toolkit.cluster import StateStore, build_plan, down, up
from toolkit.cluster.jobs import JobOutcome
from toolkit.cluster.plan import ClusterPlan
from toolkit.cluster.report import Reporter
from toolkit.errors import ExperimentError, Problem, RtkError, RunDirError
from toolkit.inventory import Inventory, load_inventory
from toolkit.profile.experiment import Experiment, RunSpec, clocks_mhz
from toolkit.rundir import IdleRecord, ProfileRunRecord, RunDir
from toolkit.telemetry.fetch import fetch_run
from toolkit.telemetry.submit import submit_record
from toolkit.train.config import TrainConfig
from toolkit.train.submit import submit_train
from toolkit.transport import Transport, make_transport

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


def run_sweep(
    experiment: Experiment,
    reporter: Reporter,
    echo: Echo,
    max_runs: int | None = None,
    keep_cluster: bool = False,
) -> SweepOutcome:
    """Run every unfinished run of the sweep (at most ``max_runs`` of them)."""
    inventory = load_inventory(experiment.inventory_path)
    store = StateStore(inventory.name)
    experiment.sweep_dir.mkdir(parents=True, exist_ok=True)
    _write_sweep_file(experiment)
    outcome = SweepOutcome()
    current: ClusterPlan | None = None
    with make_transport(inventory) as transport:
        try:
            for run in experiment.runs():
                if finished(experiment, run):
                    outcome.skipped.append(run.run_id)
                    continue
                if max_runs is not None and len(outcome.ran) >= max_runs:
                    break
                count = int(run.axes.get("nodes", len(inventory.nodes)))
                if current is None or len(current.nodes) != count:
                    if current is not None:
                        down(current, transport, store, reporter)
                    current = build_plan(subset(inventory, count))
                    reporter.info(f"bringing the cluster up on {count} node(s)")
                    up(current, transport, store, reporter)
                echo(f"rtk profile: run {run.run_id} ({len(outcome.ran) + 1} this time)")
                ok = _run_one(experiment, run, current, transport, store, echo)
                outcome.ran.append(run.run_id)
                if not ok:
                    outcome.failed.append(run.run_id)
        finally:
            if current is not None and not keep_cluster:
                down(current, transport, store, reporter)
    return outcome


def _run_one(
    experiment: Experiment,
    run: RunSpec,
    plan: ClusterPlan,
    transport: Transport,
    store: StateStore,
    echo: Echo,
) -> bool:
    """One run, recorded in its ``profile_run.json``; False when it failed."""
    from toolkit.gpu.settings import gpu_settings

    run_dir = run_dir_of(experiment, run)
    run_dir.mkdir(parents=True, exist_ok=True)
    layout = RunDir(run_dir)
    record = ProfileRunRecord(
        run_id=run.run_id,
        config_id=run.config_id,
        axes=run.axes,
        repeat=run.repeat,
        status="running",
        run_dir=str(run_dir),
        started_wall_s=time.time(),
    )
    record.write(layout.profile_run)
    try:
        with gpu_settings(
            plan,
            transport,
            power_limit_w=run.axes.get("power_limit_w"),
            gpu_clocks_mhz=clocks_mhz(run.axes.get("gpu_clocks_mhz")),
            mem_clocks_mhz=clocks_mhz(run.axes.get("mem_clocks_mhz")),
        ) as applied:
            if applied:
                record = replace(record, gpu_settings=applied)
            job = _workload(experiment, run, plan, store, str(run_dir), echo)
        _report(plan, transport, run_dir)
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


def _workload(
    experiment: Experiment,
    run: RunSpec,
    plan: ClusterPlan,
    store: StateStore,
    run_dir: str,
    echo: Echo,
) -> JobOutcome:
    spec = experiment.spec
    workload = spec.workload
    idle = {"baseline_s": spec.baseline_s, "cooldown_max_s": spec.cooldown_max_s}
    if workload.train is not None:
        options = experiment.train_options(run.axes)
        config = TrainConfig(run_dir=run_dir, **options, **idle).check()  # type: ignore[arg-type]
        return submit_train(plan, store, config, Path(run_dir).name, echo)
    if workload.vllm is not None:
        settings = {**workload.vllm.model_dump(), **run.axes}
        bench = "toolkit.profile.vllm_bench"
        command = [plan.head.node.python, "-m", bench, json.dumps(settings)]
    else:
        command = list(workload.command or [])
    env = {f"RTK_AXIS_{k.upper()}": json.dumps(v) for k, v in run.axes.items()}
    options = {"run_dir": run_dir, "sensors": "auto", "rate_hz": 10.0, **idle}
    return submit_record(plan, store, command, options, workload.working_dir, echo, env)


def _report(plan: ClusterPlan, transport: Transport, run_dir: Path) -> None:
    """Build the run's report here, bringing its results from the head if needed."""
    from toolkit.telemetry.report import build_report, write_report

    if not RunDir(run_dir).has_telemetry:
        fetch_run(plan, transport, str(run_dir), run_dir)
    write_report(build_report(run_dir))


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
