"""The three workloads a session runs, and the Ray job request each becomes (pure).

``job_request`` turns a workload into a ``JobRequest``: the entrypoint, runtime
environment and submission id of the Ray job, computed without touching anything.
``--dry-run`` prints it; ``Session.run_workload`` submits it. ``ExecRequest`` is the
same for ``rtk exec``: one shell command on every node, no job. ``stall_check_request``
is ``rtk stall-check``'s job, which runs no workload: it looks at one that runs.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from toolkit.cluster.plan import ClusterPlan
from toolkit.inventory.hostrange import fit_hostlist
from toolkit.jobs.runtime_env import working_dir_env
from toolkit.jobs.shipped_code import code_env
from toolkit.json_types import JsonObject
from toolkit.power.settings import PowerSettings
from toolkit.stall.settings import CHECK_MODULE, CheckOptions, WatchSettings
from toolkit.state.store import state_root
from toolkit.telemetry.options import TelemetryOptions
from toolkit.telemetry.record_submission import record_job
from toolkit.torchrun.spec import TorchrunSpec, node_argv, nproc_for
from toolkit.train.config import TrainConfig
from toolkit.train.job_spec import train_job

VLLM_BENCH_MODULE = "toolkit.profile.vllm_bench"
TORCHRUN_MODULE = "toolkit.torchrun.fanout"


@dataclass(frozen=True)
class TrainWorkload:
    """The built-in trainer; its run directory is ``config.run_dir``."""

    config: TrainConfig
    run_id: str

    @property
    def run_dir(self) -> str | None:
        """Where the run writes (on the nodes)."""
        return self.config.run_dir


@dataclass(frozen=True)
class CommandWorkload:
    """Any command, run on the head inside ``working_dir`` (shipped with the job).

    With ``telemetry`` (and then ``run_dir``), samplers record every node around it
    (``rtk telemetry record``, ``rtk profile``); without, it is a plain job
    (``rtk launch``). ``env`` is added to the command's environment.
    """

    argv: tuple[str, ...]
    working_dir: str = "."
    env: Mapping[str, str] = field(default_factory=dict)
    run_dir: str | None = None
    telemetry: TelemetryOptions | None = None
    name: str = "launch"
    stall: WatchSettings | None = None  # with telemetry: watch its ranks for stalls
    power: PowerSettings | None = None  # with telemetry: set its GPUs' power limits


@dataclass(frozen=True)
class VllmWorkload:
    """The vLLM benchmark (``toolkit.profile.vllm_bench``) with ``settings``, under telemetry."""

    settings: Mapping[str, Any]
    run_dir: str
    telemetry: TelemetryOptions = field(default_factory=TelemetryOptions)
    working_dir: str = "."
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TorchrunWorkload:
    """``rtk torchrun``: torchrun on every node (``toolkit.torchrun``), under telemetry."""

    spec: TorchrunSpec
    run_dir: str
    working_dir: str = "."
    telemetry: TelemetryOptions = field(default_factory=TelemetryOptions)


Workload = TrainWorkload | CommandWorkload | VllmWorkload | TorchrunWorkload


class Driver(StrEnum):
    """Where a job's driver runs.

    ``JOB``: submitted to Ray's Jobs API, whose supervisor starts it on the head
    (``rtk jobs``, ``logs`` and ``stop`` reach it). ``LOCAL``: a process started by
    rtk on this machine, which is the head, as Ray's SLURM template runs its program
    (``jobs.local_driver``: no supervisor to start first, so the job starts sooner).
    ``AUTO``: ``LOCAL`` inside a SLURM allocation on the head, else ``JOB``.
    """

    AUTO = "auto"
    JOB = "job"
    LOCAL = "local"


@dataclass(frozen=True)
class JobRequest:
    """A Ray job as it would be submitted: printable, nothing started."""

    kind: str
    entrypoint: str
    runtime_env: Mapping[str, Any]
    submission_id: str
    dashboard_url: str
    run_dir: str | None = None
    driver: Driver = Driver.JOB
    notes: tuple[str, ...] = ()  # lines ``--dry-run`` prints after the request

    def render(self) -> str:
        """The request as text (``--dry-run``)."""
        if self.driver is Driver.LOCAL:
            how = "as a process here, on the head (not through the Jobs API)"
        else:
            how = f"via {self.dashboard_url}"
        lines = [
            f"{self.kind} job {self.submission_id} {how}",
            f"  entrypoint: {self.entrypoint}",
        ]
        for key, value in self.runtime_env.items():
            if isinstance(value, Mapping):
                lines.append(f"  {key}:")
                lines += [f"    {k}={v}" for k, v in value.items()]
            else:
                lines.append(f"  {key}: {value}")
        if self.run_dir:
            lines.append(f"  run directory: {self.run_dir}")
        lines += [f"  {note}" for note in self.notes]
        return "\n".join(lines) + "\n"

    def to_json(self) -> JsonObject:
        """A JSON-ready dict."""
        return {
            "kind": self.kind,
            "entrypoint": self.entrypoint,
            "runtime_env": dict(self.runtime_env),
            "submission_id": self.submission_id,
            "dashboard_url": self.dashboard_url,
            "run_dir": self.run_dir,
            "driver": self.driver.value,
        }


@dataclass(frozen=True)
class ExecRequest:
    """One shell command on every node (``rtk exec``), as it would run."""

    cluster: str
    transport: str
    nodes: tuple[str, ...]
    command: str
    timeout_s: float
    in_containers: tuple[str, ...] = ()  # ``[hosts] docker exec ...``, nodes with one

    def render(self) -> str:
        """The request as text (``--dry-run``)."""
        text = (
            f"cluster {self.cluster!r}: on {len(self.nodes)} node(s) over {self.transport} "
            f"({', '.join(self.nodes)}), at most {self.timeout_s:g} s each:\n"
            f"  {self.command}\n"
        )
        if self.in_containers:
            text += "inside the node's container, on the nodes that have one:\n"
            text += "".join(f"  {line}\n" for line in self.in_containers)
        return text


def job_request(
    plan: ClusterPlan, workload: Workload, now_s: float | None = None, ship_code: bool = True
) -> JobRequest:
    """The Ray job that runs ``workload`` on ``plan``'s cluster (pure).

    ``ship_code`` False: the nodes import the same rtk as this machine, and the job
    carries none (``toolkit.jobs.shipped_code``).
    """
    stamp = int(time.time() if now_s is None else now_s)
    url = plan.dashboard_url
    if isinstance(workload, TrainWorkload):
        entrypoint, train_env = train_job(plan, workload.config, ship_code)
        name = f"rtk-train-{workload.run_id}-{stamp}"
        return JobRequest("train", entrypoint, train_env, name, url, workload.run_dir)
    if isinstance(workload, VllmWorkload):
        python = plan.head.node.python
        argv = [python, "-m", VLLM_BENCH_MODULE, json.dumps(dict(workload.settings))]
        command = CommandWorkload(
            tuple(argv), workload.working_dir, workload.env, workload.run_dir, workload.telemetry
        )
        return _recorded(plan, command, "vllm", stamp, ship_code)
    if isinstance(workload, TorchrunWorkload):
        return _torchrun(plan, workload, stamp, ship_code)
    if workload.telemetry is not None:
        return _recorded(plan, workload, "record", stamp, ship_code)
    env = working_dir_env(workload.working_dir, workload.run_dir, str(state_root()))
    if workload.env:
        env["env_vars"] = dict(workload.env)
    name = f"rtk-{workload.name}-{plan.inventory.name}-{stamp}"
    return JobRequest("command", shlex.join(workload.argv), env, name, url, workload.run_dir)


def _recorded(
    plan: ClusterPlan, workload: CommandWorkload, kind: str, stamp: int, ship_code: bool
) -> JobRequest:
    run_dir = workload.run_dir or "."
    telemetry = workload.telemetry or TelemetryOptions()
    entrypoint, env = record_job(
        plan,
        list(workload.argv),
        run_dir,
        telemetry,
        workload.working_dir,
        workload.env,
        ship_code,
        workload.stall,
        workload.power,
    )
    name = f"rtk-record-{Path(run_dir).name}-{stamp}"
    return JobRequest(kind, entrypoint, env, name, plan.dashboard_url, run_dir)


def _torchrun(
    plan: ClusterPlan, workload: TorchrunWorkload, stamp: int, ship_code: bool
) -> JobRequest:
    spec = workload.spec
    argv = [plan.head.node.python, "-m", TORCHRUN_MODULE, json.dumps(spec.to_json())]
    # Every rank's every line, as torchrun prints them: Ray's log deduplication (read
    # when the driver imports Ray) folds lines that differ only in numbers into one.
    env = {"RAY_DEDUP_LOGS": "0"}
    command = CommandWorkload(
        tuple(argv), workload.working_dir, env, workload.run_dir, workload.telemetry
    )
    request = _recorded(plan, command, "torchrun", stamp, ship_code)
    return dataclasses.replace(
        request,
        submission_id=request.submission_id.replace("rtk-record-", "rtk-torchrun-", 1),
        notes=tuple(torchrun_lines(plan, spec)),
    )


def torchrun_lines(plan: ClusterPlan, spec: TorchrunSpec) -> list[str]:
    """What each node runs, one line per distinct command (``--dry-run``).

    The rendezvous address is the head's as the inventory gives it; the job uses the
    address Ray knows the head by.
    """
    nodes = [n.node for n in plan.nodes]
    by_command: dict[str, list[str]] = {}
    for index, node in enumerate(nodes):
        nproc = nproc_for(spec, node.gpus)
        argv = node_argv(spec, len(nodes), plan.head.node.address, nproc, is_host=index == 0)
        by_command.setdefault(shlex.join([node.python, *argv]), []).append(node.name)
    lines = ["torchrun on every node, started together by the job:"]
    for command, names in by_command.items():
        lines.append(f"  {fit_hostlist(names, 60)} ({len(names)}): {command}")
    if spec.env:
        lines.append("  with " + " ".join(f"{k}={v}" for k, v in spec.env.items()))
    return lines


def stall_check_request(
    plan: ClusterPlan, options: CheckOptions, now_s: float | None = None, ship_code: bool = True
) -> JobRequest:
    """The Ray job of ``rtk stall-check``: ``toolkit.stall.check_job`` on the head (pure).

    ``ship_code`` as in ``job_request``.
    """
    stamp = int(time.time() if now_s is None else now_s)
    argv = [plan.head.node.python, "-m", CHECK_MODULE, json.dumps(options.to_json())]
    name = f"rtk-stall-check-{Path(options.run_dir).name or 'run'}-{stamp}"
    return JobRequest(
        "stall-check",
        shlex.join(argv),
        code_env(ship_code),
        name,
        plan.dashboard_url,
        options.run_dir,
    )
