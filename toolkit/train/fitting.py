"""Ray Train's fit, as the ``rtk train`` driver's workload (``toolkit.jobdriver``).

``TrainRun`` builds the TorchTrainer for a run and its worker group, runs ``fit`` in a
thread (the main thread waits, so a stall the policy aborts can end the wait; a run
that stops with a checkpoint takes SIGINT as its stop request, ``toolkit.train.stop``)
and turns Ray Train's result into the job's exit status with one line that says why.
Under ``--on-stall restart-excluding`` it takes the suspect nodes out of Ray and lets
the elastic group restart from the last checkpoint on the nodes left.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import ray
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from toolkit.rundir import RunDir
from toolkit.rundir.layout import CHECKPOINTS_DIR
from toolkit.stall.collect import ray_node_ids
from toolkit.stall.node_exclusion import exclude_nodes, why_not_exclude
from toolkit.stall.records import StallRecord
from toolkit.train.config import TrainConfig
from toolkit.train.ray_worker import train_loop_per_worker
from toolkit.train.stop import STOPPED_EXIT, Fittable, StopOnInterrupt, fit_in_thread, stopped
from toolkit.train.workers import WorkerLayout

RUN_NAME = CHECKPOINTS_DIR  # Ray Train keeps its checkpoints in RUN_DIR/RUN_NAME


def make_trainer(config: TrainConfig, layout: WorkerLayout) -> TorchTrainer:
    """Ray Train's trainer for the run, its checkpoints kept in the run directory."""
    return TorchTrainer(
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


class TrainRun:
    """One training run through Ray Train (see the module).

    Args:
        config: The run.
        layout: Its worker group.
        say: Prints one of rtk's lines in the job's log.
        trainer: What fits (tests pass their own; by default ``make_trainer``'s).
    """

    def __init__(
        self,
        config: TrainConfig,
        layout: WorkerLayout,
        say: Callable[[str], None],
        trainer: Fittable[Any] | None = None,
    ) -> None:
        self.config, self.layout, self.say = config, layout, say
        self.trainer = trainer if trainer is not None else make_trainer(config, layout)
        self.stop_request = (
            StopOnInterrupt(RunDir(config.run_dir)) if config.stops_with_checkpoint else None
        )
        if self.stop_request is not None:
            self.stop_request.clear()  # a request left by the allocation before this one
        self._ended = threading.Event()

    def run(self) -> int:
        """Fit; 0 at the last step, ``STOPPED_EXIT`` stopped as asked, else 1."""
        if self.stop_request is not None:
            result: Any = self.stop_request.fit(self.trainer, until=self._ended)
        else:
            result = fit_in_thread(self.trainer, until=self._ended)
        if result is None:  # stopped from outside (a stall): the workers end with us
            return 1
        # Ray Train keeps the metrics of reports that came with a checkpoint.
        final = result.metrics or {}
        if getattr(result, "error", None) is not None:
            self.say(f"ended early: {result.error}")
            return 1
        if stopped(self.stop_request) and int(final.get("step") or 0) < self.config.max_steps:
            self.say(f"stopped as asked at step {final.get('step')}")
            return STOPPED_EXIT
        # A resumed run without --save-steps reports its last step without a checkpoint,
        # so Ray Train's metrics are the restored checkpoint's: only the last step's say
        # more.
        if final.get("step") == self.config.max_steps:
            self.say(f"finished at step {final['step']} (loss {final.get('loss')})")
        else:
            self.say(f"finished {self.config.max_steps} steps (metrics.jsonl)")
        return 0

    def stop(self) -> None:
        """End the wait for ``fit`` (the ranks cannot stop themselves in a stall)."""
        self._ended.set()

    def restart(self, record: StallRecord) -> str | None:
        """Take the record's excluded nodes out of Ray; why not, when it cannot.

        It cannot when that would leave too few nodes, or exclude the head, or nothing.
        """
        node_ids = ray_node_ids()
        here = ray.get_runtime_context().get_node_id()
        head = next((name for name, node_id in node_ids.items() if node_id == here), None)
        min_nodes = self.config.min_nodes if self.layout.min_workers is not None else 0
        why = why_not_exclude(record.excluded, list(node_ids), head, min_nodes)
        if why is not None:
            return why
        answered = [n.node for n in record.nodes if n.answered]
        for name, what in exclude_nodes(record.excluded, node_ids, answered).items():
            self.say(f"--on-stall restart-excluding: {name}: {what}")
        self.say("Ray Train restarts from the last checkpoint on the nodes left")
        return None
