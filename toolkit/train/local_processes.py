"""Run ``train_worker`` on N local processes with gloo: the trainer without Ray.

Used by the tests and benchmarks to exercise the loop, strategies, markers and
checkpoints on one machine, with no cluster.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch.distributed as dist
import torch.multiprocessing as mp

from toolkit.rundir import MetricsLine
from toolkit.train.config import TrainConfig
from toolkit.train.loop import train_worker

T = TypeVar("T")


class LocalContext:
    """Checkpoints go to run_dir/checkpoints/step-NNNNN; every rank's files merge there."""

    def __init__(self, rank: int, world_size: int, run_dir: Path, keep: int) -> None:
        """A context for ``rank`` of ``world_size`` keeping ``keep`` checkpoints."""
        self.rank = rank
        self.local_rank = rank
        self.world_size = world_size
        self.root = run_dir / "checkpoints"
        self.keep = keep

    def report(self, metrics: MetricsLine, checkpoint_dir: Path | None) -> None:
        """Copy this rank's checkpoint files into the step's directory; keep the newest."""
        if checkpoint_dir is not None:
            target = self.root / f"step-{metrics.step:05d}"
            shutil.copytree(checkpoint_dir, target, dirs_exist_ok=True)
        dist.barrier()
        if self.rank == 0 and checkpoint_dir is not None:
            for old in sorted(self.root.glob("step-*"))[: -self.keep]:
                shutil.rmtree(old)
        dist.barrier()

    def load_latest(self, load: Callable[[Path], T]) -> T | None:
        """Load the newest checkpoint, if any."""
        found = sorted(self.root.glob("step-*"))
        return load(found[-1]) if found else None


def _worker(
    rank: int, world: int, init: str, config: TrainConfig, env: dict[str, str], cwd: str
) -> None:
    # The fork server's environment and directory are those it started with: this run's
    # are the caller's now.
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    os.environ["RTK_NODE"] = f"local{rank}"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        context = LocalContext(rank, world, Path(config.run_dir), config.keep_checkpoints)
        train_worker(config, context)
    finally:
        dist.destroy_process_group()


# The ranks are forked from one server process that has imported torch and the trainer
# already (started on the first call, kept for the caller's life): a spawned rank spent
# about half its start, 1.5 s of CPU, importing them anew.
_PRELOAD = ["toolkit.train.loop", "torch.distributed"]


def run_local(config: TrainConfig, world: int, rendezvous: Path) -> None:
    """Train on ``world`` local processes; raises when any rank fails."""
    rendezvous.unlink(missing_ok=True)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    mp.start_processes(  # type: ignore[attr-defined,no-untyped-call]
        _worker,
        args=(world, f"file://{rendezvous}", config, dict(os.environ), os.getcwd()),
        nprocs=world,
        join=True,
        start_method="forkserver",
    )
