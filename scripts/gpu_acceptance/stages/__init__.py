"""The seven stages, in the order they run.

Each stage is a module here with ``describe(ctx) -> str`` (what it would do, for
``--dry-run``) and ``run(ctx, io) -> None`` (runs in its own process, records through
``io``: see ``gpu_acceptance.stage.StageIO``). The runner gives each one at most its
``timeout_s`` (``quick_timeout_s`` with ``--quick``) and never more than what is left
of the run's time budget.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class StageSpec:
    """A stage: its name, what it checks, its module and its time limits.

    Attributes:
        name: What ``--stages`` takes and the JSON calls it.
        title: What it checks, in a few words.
        module: The module under ``gpu_acceptance.stages``.
        timeout_s: Its time limit in a full run.
        quick_timeout_s: Its time limit with ``--quick``.
        min_s: Below this much time left, it is skipped rather than started.
    """

    name: str
    title: str
    module: str
    timeout_s: float
    quick_timeout_s: float
    min_s: float = 20.0

    def load(self) -> ModuleType:
        """The stage's module."""
        return importlib.import_module(f"gpu_acceptance.stages.{self.module}")


STAGES: tuple[StageSpec, ...] = (
    StageSpec("pytest-gpu", "rtk's GPU-marked tests (pytest -m gpu)", "pytest_gpu", 150, 150),
    StageSpec("sensor", "NVML sensor: rates, CPU cost, cost per sample", "sensor", 90, 40),
    StageSpec("energy", "energy truth: rtk vs nvidia-smi vs Zeus", "energy", 60, 35),
    StageSpec("train", "training at 125M bf16 per strategy, with telemetry", "train", 300, 180),
    StageSpec(
        "power-clocks", "power limit and locked clocks: set, train, restore", "power", 150, 120
    ),
    StageSpec(
        "preflight",
        "preflight's GPU checks against nvidia-smi and dcgmi, and its load test",
        "preflight",
        90,
        75,
    ),
    StageSpec("vllm", "vLLM on a tiny local model over two power limits", "vllm", 240, 180),
)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)


def by_name(name: str) -> StageSpec:
    """The stage called ``name``.

    Raises:
        KeyError: No such stage.
    """
    for spec in STAGES:
        if spec.name == name:
            return spec
    raise KeyError(name)
