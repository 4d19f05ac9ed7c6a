"""Ray Train's side of the loop: a ``WorkerContext`` over ``ray.train``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import ray.train

from toolkit.json_types import JsonObject
from toolkit.rundir import MetricsLine
from toolkit.train.config import TrainConfig
from toolkit.train.loop import train_worker

T = TypeVar("T")


class RayTrainContext:
    """Rank and checkpoints from Ray Train; every rank reports every step."""

    def __init__(self) -> None:
        ctx = ray.train.get_context()
        self.rank = ctx.get_world_rank()
        self.local_rank = ctx.get_local_rank()
        self.world_size = ctx.get_world_size()

    def report(self, metrics: MetricsLine, checkpoint_dir: Path | None) -> None:
        """Report metrics; a checkpoint directory's files join the step's checkpoint.

        Ray Train takes them as ``metrics.jsonl`` writes them (its ``Result.metrics``,
        which the job driver reads ``step`` and ``loss`` from).
        """
        checkpoint = (
            ray.train.Checkpoint.from_directory(str(checkpoint_dir)) if checkpoint_dir else None
        )
        ray.train.report(metrics.to_json(), checkpoint=checkpoint)

    def load_latest(self, load: Callable[[Path], T]) -> T | None:
        """Load the checkpoint Ray Train restores this run from, if any."""
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            return None
        with checkpoint.as_directory() as directory:
            return load(Path(directory))


def train_loop_per_worker(config: JsonObject) -> None:
    """Ray Train's entry on every worker: ``config`` is ``TrainConfig.to_json()``.

    The job hands it to Ray Train as ``train_loop_config``, which gives it to each worker.
    """
    train_worker(TrainConfig.from_json(config), RayTrainContext())
