"""The Ray job that ``rtk train`` submits: ``python -m toolkit.train.job CONFIG_JSON``.

It runs on the head, sizes the worker group from the cluster (one worker per GPU, or
per node on CPU clusters, unless --num-workers says otherwise) and runs Ray Train's
TorchTrainer with checkpoints kept in the run directory.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from toolkit.driver_gate import gate_passed
from toolkit.power.driver import power_driver
from toolkit.ray_resources import NODE_RESOURCE
from toolkit.rundir import RunDir, TrainConfigRecord
from toolkit.rundir.layout import CHECKPOINTS_DIR
from toolkit.stall.collect import ray_node_ids
from toolkit.stall.exclude import exclude_nodes, why_not_exclude
from toolkit.stall.records import StallRecord
from toolkit.stall.settings import STALL_EXIT
from toolkit.stall.watchdog import Watchdog
from toolkit.telemetry.rank_files import gather_rank_files
from toolkit.telemetry.session import TelemetrySession, exit_on_sigterm
from toolkit.telemetry.settle import IdlePhases
from toolkit.train.config import TrainConfig
from toolkit.train.ray_worker import train_loop_per_worker
from toolkit.train.stop import STOPPED_EXIT, StopOnInterrupt, stopped

RUN_NAME = CHECKPOINTS_DIR  # Ray Train keeps its checkpoints in RUN_DIR/RUN_NAME


@dataclass(frozen=True)
class WorkerLayout:
    """Ray Train's worker group (``ScalingConfig``), as ``train_config.json`` records it.

    Attributes:
        num_workers: The workers (ranks).
        resources_per_worker: The Ray resources each worker holds.
        use_gpu: Whether the workers train on GPUs.
        placement_strategy: ``STRICT_SPREAD`` (one CPU worker per node) or ``SPREAD``.
    """

    num_workers: int
    resources_per_worker: dict[str, float]
    use_gpu: bool
    placement_strategy: str
    min_workers: int | None = None

    @property
    def scaling_workers(self) -> int | tuple[int, int]:
        """Ray Train's ``num_workers``: a (min, max) range when the group is elastic."""
        if self.min_workers is None or self.min_workers >= self.num_workers:
            return self.num_workers
        return (self.min_workers, self.num_workers)

    def to_json(self) -> dict[str, Any]:
        """The layout as ``train_config.json`` keeps it, under ``layout``."""
        return {
            "num_workers": self.num_workers,
            "resources_per_worker": dict(self.resources_per_worker),
            "use_gpu": self.use_gpu,
            "placement_strategy": self.placement_strategy,
            **({"min_workers": self.min_workers} if self.min_workers is not None else {}),
        }


def worker_layout(config: TrainConfig, resources: Mapping[str, float], nodes: int) -> WorkerLayout:
    """How many workers, with what resources each, from the cluster's totals."""
    gpus = int(resources.get("GPU", 0))
    per_worker = dict(config.resources_per_worker) or ({"GPU": 1.0} if gpus else {"CPU": 1.0})
    if config.num_workers:
        count = config.num_workers
    elif per_worker.get("GPU"):
        count = max(1, int(gpus // per_worker["GPU"]))
    else:
        count = max(1, nodes)
    use_gpu = bool(per_worker.get("GPU"))
    # restart-excluding: the group may shrink with the nodes, down to min_nodes' share.
    min_workers = (
        max(1, math.ceil(count * config.min_nodes / nodes))
        if config.min_nodes and nodes and config.min_nodes < nodes
        else None
    )
    if min_workers is not None and not use_gpu and count <= nodes:
        # Ray Train sizes an elastic group by resources, not by placement: one worker a
        # node must ask for the one resource each node has, or 3 workers "fit" on 2
        # nodes' CPUs and the STRICT_SPREAD group waits for a third node forever.
        per_worker = {**per_worker, NODE_RESOURCE: 1.0}
    return WorkerLayout(
        num_workers=count,
        resources_per_worker=per_worker,
        use_gpu=use_gpu,
        # One worker per node on CPU clusters must stay one per node: after a node is
        # lost the restart waits for it rather than doubling up on a survivor. GPU
        # workers are held to their GPUs by the GPU resource itself.
        placement_strategy="STRICT_SPREAD" if not use_gpu and count <= nodes else "SPREAD",
        min_workers=min_workers,
    )


def placement_problem(layout: WorkerLayout, totals: Mapping[str, float]) -> str | None:
    """Why the cluster can never hold ``layout``'s workers; None when it can.

    Ray Train would otherwise wait for the resources until its start timeout
    (--restart-wait-s, ten minutes by default): a GPU asked of a CPU cluster, or more
    CPUs than all nodes have, is better said at once.
    """
    count = layout.num_workers
    for name, amount in layout.resources_per_worker.items():
        need, have = count * amount, totals.get(name, 0.0)
        if need > have:
            return (
                f"{count} worker(s) x {{{name!r}: {amount:g}}} need {need:g} {name} in all; "
                f"the cluster has {have:g}. Change --resources-per-worker or --num-workers "
                "(0: one per GPU, or one per node on CPU clusters)"
            )
    return None


def main(argv: list[str]) -> int:
    """Run the training job described by the JSON in ``argv[0]``."""
    config = TrainConfig.from_json(json.loads(argv[0])).check()
    # "~" in --output-dir means the home of the user the job runs as, on the nodes.
    config = dataclasses.replace(config, run_dir=os.path.expanduser(config.run_dir))
    Path(config.run_dir).mkdir(parents=True, exist_ok=True)
    ray.init(logging_level=logging.ERROR)
    exit_on_sigterm()  # after ray.init, which installs a SIGTERM handler of its own
    alive = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
    totals: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    layout = worker_layout(config, totals, len(alive))
    problem = placement_problem(layout, totals)
    if problem is not None:
        print(f"rtk train: cannot start: {problem}", flush=True)
        return 1
    print(
        f"rtk train: {layout.num_workers} worker(s) x {layout.resources_per_worker}, "
        f"strategy {config.strategy}, run dir {config.run_dir}",
        flush=True,
    )
    TrainConfigRecord(config.to_json(), layout.to_json()).write(RunDir(config.run_dir).train_config)
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config=config.to_json(),
        scaling_config=ScalingConfig(
            num_workers=layout.scaling_workers,  # type: ignore[arg-type]  # Train v2 takes a range
            use_gpu=layout.use_gpu,
            resources_per_worker=layout.resources_per_worker,
            placement_strategy=layout.placement_strategy,
        ),
        run_config=RunConfig(
            name=RUN_NAME,
            storage_path=config.run_dir,
            # Excluding a node costs up to two failures: the node's loss, and a restart
            # that may still ask for it (Ray's resource view lags) and time out.
            failure_config=FailureConfig(
                max_failures=max(config.max_failures, 2 if layout.min_workers else 0)
            ),
            checkpoint_config=CheckpointConfig(num_to_keep=config.keep_checkpoints),
        ),
    )
    session = (
        TelemetrySession(
            config.run_dir,
            config.telemetry_sensors,
            config.telemetry_rate_hz,
            config.power_rate_hz or None,
            prometheus_port=config.prometheus_port,
            energy_rate_hz=config.energy_rate_hz or None,
        )
        if config.telemetry
        else None
    )
    idle = (
        IdlePhases(
            session,
            config.run_dir,
            config.baseline_s,
            config.cooldown_max_s,
            lambda line: print(f"rtk train: {line}", flush=True),
        )
        if session is not None
        else None
    )
    stop = StopOnInterrupt(RunDir(config.run_dir)) if config.stops_with_checkpoint else None
    if stop is not None:
        stop.clear()  # a request left by the allocation before this one
    if session is not None:
        session.start()

    def say(line: str) -> None:
        print(f"rtk train: {line}", flush=True)

    def abort(_: StallRecord) -> None:
        _abort(session, config.run_dir)

    def restart(record: StallRecord) -> None:
        node_ids = ray_node_ids()
        here = ray.get_runtime_context().get_node_id()
        head = next((name for name, node_id in node_ids.items() if node_id == here), None)
        min_nodes = config.min_nodes if layout.min_workers is not None else 0
        why = why_not_exclude(record.excluded, list(node_ids), head, min_nodes)
        if why is not None:
            say(f"--on-stall restart-excluding: {why}; stopping instead")
            abort(record)
            return
        answered = [n.node for n in record.nodes if n.answered]
        for name, what in exclude_nodes(record.excluded, node_ids, answered).items():
            say(f"--on-stall restart-excluding: {name}: {what}")
        say("Ray Train restarts from the last checkpoint on the nodes left")

    watchdog = Watchdog(config.run_dir, config.stall(), say, abort=abort, restart=restart).start()
    try:
        if idle is not None:
            idle.before()
        power = power_driver(config.run_dir, config.power(), say)
        try:
            result = stop.fit(trainer) if stop is not None else trainer.fit()
        finally:
            if power is not None:
                power.stop()  # the limits go back before the cooldown is measured
        if idle is not None and getattr(result, "error", None) is None and not stopped(stop):
            idle.after()  # no cooldown for a run stopped early: time is short then
    finally:
        watchdog.stop()
        if idle is not None:
            idle.save()
        # With telemetry or without: rank 0's metrics and the markers may lie on other
        # nodes (no shared filesystem), and rtk fetches the run from the head alone.
        gather_rank_files(config.run_dir, session.helpers() if session is not None else None)
        if session is not None:
            session.stop()
    # Ray Train keeps the metrics of reports that came with a checkpoint.
    final = result.metrics or {}
    if getattr(result, "error", None) is not None:
        print(f"rtk train: ended early: {result.error}", flush=True)
        return 1
    if stopped(stop) and int(final.get("step") or 0) < config.max_steps:
        print(f"rtk train: stopped as asked at step {final.get('step')}", flush=True)
        return STOPPED_EXIT
    # A resumed run without --save-steps reports its last step without a checkpoint, so
    # Ray Train's metrics are the restored checkpoint's: only the last step's say more.
    if final.get("step") == config.max_steps:
        print(f"rtk train: finished at step {final['step']} (loss {final.get('loss')})", flush=True)
    else:
        print(f"rtk train: finished {config.max_steps} steps (metrics.jsonl)", flush=True)

    return 0


def _abort(session: TelemetrySession | None, run_dir: str) -> None:
    """End the job after a stall (``--on-stall abort``): its ranks cannot stop themselves.

    The telemetry and the rank files are saved as at any end; then the driver exits
    with ``STALL_EXIT``, and Ray ends the job's workers, which the driver owns.
    """
    try:
        gather_rank_files(run_dir, session.helpers() if session is not None else None)
        if session is not None:
            session.stop()
    finally:
        print(f"rtk train: stopped after a stall (exit {STALL_EXIT})", flush=True)
        sys.stdout.flush()
        os._exit(STALL_EXIT)


if __name__ == "__main__":
    # Started ahead of the cluster (rtk train --up): imports done, wait for the word.
    if not gate_passed(os.environ, sys.stdin):
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
