"""What a sweep would do, as steps: ``rtk profile --dry-run`` prints them, the run walks them.

``plan_sweep`` reads the experiment and its sweep directory (which runs finished in
an earlier invocation) and touches no node. Its ``SweepPlan.steps`` are the cluster
brought up on a run's node count, the runs on it, and the cluster taken down when the
next run needs another count (and at the end, unless ``--keep-cluster``);
``flows.sweep.run_sweep`` takes exactly these steps, in order, and records them.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from toolkit.cluster.plan import build_plan
from toolkit.errors import ExperimentError, Problem, RunDirError
from toolkit.flows.job_requests import job_request
from toolkit.inventory import Inventory, load_inventory
from toolkit.jobs.request import JobRequest
from toolkit.profile.experiment import Experiment, train_config
from toolkit.profile.run_spec import RunSpec
from toolkit.rundir import ProfileRunRecord, RunDir
from toolkit.telemetry.options import TelemetryOptions
from toolkit.workloads import CommandWorkload, TrainWorkload, VllmWorkload, Workload


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


class SweepStepKind(StrEnum):
    """What a step of a sweep does."""

    UP = "up"  # the cluster brought up on the next runs' node count
    RUN = "run"  # one run: its GPU settings, its job under telemetry, its report
    DOWN = "down"  # the cluster taken down (also when a run failed or was stopped)


@dataclass(frozen=True)
class PlannedRun:
    """One run a sweep would do: its cluster size, the GPU settings it asks for, its job.

    Attributes:
        spec: The run as the experiment makes it.
        nodes: How many of the inventory's nodes it runs on.
        job: The Ray job it submits.
    """

    spec: RunSpec
    nodes: int
    job: JobRequest

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.spec.run_id


@dataclass(frozen=True)
class SweepStep:
    """One step of a sweep: bring up or take down ``nodes`` nodes, or do ``run``."""

    kind: SweepStepKind
    nodes: int
    run: PlannedRun | None = None

    def render(self, inventory: Inventory) -> list[str]:
        """The step's lines (``--dry-run``): the first one, then lines under it."""
        if self.kind is SweepStepKind.UP:
            names = [n.name for n in subset(inventory, self.nodes).nodes]
            return [f"up: the cluster on {self.nodes} node(s) ({', '.join(names)}), no checks"]
        if self.kind is SweepStepKind.DOWN:
            return [f"down: the cluster of {self.nodes} node(s), also when a run failed"]
        assert self.run is not None
        run = self.run
        gpu = f"; {run.spec.gpu_axes}, put back after the run" if run.spec.gpu_axes else ""
        lines = [f"run {run.run_id}: on {self.nodes} node(s){gpu}; its report after the job"]
        return lines + [f"   {line}" for line in run.job.render().splitlines()]


@dataclass(frozen=True)
class SweepPlan:
    """The steps a sweep would take, in order (``rtk profile --dry-run``)."""

    name: str
    sweep_dir: Path
    inventory: Inventory
    steps: tuple[SweepStep, ...]
    skipped: tuple[str, ...]

    @property
    def runs(self) -> list[PlannedRun]:
        """The runs to do, in order."""
        return [s.run for s in self.steps if s.run is not None]

    def render(self) -> str:
        """The plan as text: one numbered line per step."""
        lines = [
            f"sweep {self.name!r} in {self.sweep_dir}: {len(self.runs)} run(s) to do, "
            f"{len(self.skipped)} finished earlier and skipped"
        ]
        for number, step in enumerate(self.steps, 1):
            first, *more = step.render(self.inventory)
            lines += [f"{number}. {first}", *more]
        return "\n".join(lines) + "\n"


def plan_sweep(
    experiment: Experiment, max_runs: int | None = None, keep_cluster: bool = False
) -> SweepPlan:
    """What ``run_sweep`` would do now (pure: reads the sweep directory, touches no node).

    Raises:
        ExperimentError: A run asks for more nodes than the inventory has.
    """
    inventory = load_inventory(experiment.inventory_path)
    steps: list[SweepStep] = []
    skipped: list[str] = []
    planned = 0
    up: int | None = None  # the node count of the cluster as the steps so far leave it
    for run in experiment.runs():
        if finished(experiment, run):
            skipped.append(run.run_id)
            continue
        if max_runs is not None and planned >= max_runs:
            break
        count = run.nodes if run.nodes is not None else len(inventory.nodes)
        if up != count:
            if up is not None:
                steps.append(SweepStep(SweepStepKind.DOWN, up))
            steps.append(SweepStep(SweepStepKind.UP, count))
            up = count
        plan = build_plan(subset(inventory, count))
        job = job_request(plan, workload_of(experiment, run, str(run_dir_of(experiment, run))))
        steps.append(SweepStep(SweepStepKind.RUN, count, PlannedRun(run, count, job)))
        planned += 1
    if up is not None and not keep_cluster:
        steps.append(SweepStep(SweepStepKind.DOWN, up))
    return SweepPlan(
        experiment.spec.name, experiment.sweep_dir, inventory, tuple(steps), tuple(skipped)
    )


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
