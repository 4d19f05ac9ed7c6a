"""The stages, in the order they run: eight without Ray, then nine through Ray.

Each stage is a module here with ``describe(ctx) -> str`` (what it would do, for
``--dry-run``) and ``run(ctx, io) -> None`` (runs in its own process, records through
``io``: see ``gpu_acceptance.stage.StageIO``). The runner gives each one at most its
``timeout_s`` (``quick_timeout_s`` with ``--quick``) and never more than what is left
of the run's time budget.

The Ray stages (``ray=True``, modules in ``with_ray/``) go through rtk's own commands on
a one-node Ray cluster: ``ray-up`` brings it up first and ``ray-down`` stops it last,
always (the runner runs it in a ``finally``, whatever the budget says). Each also has
``commands(ctx)``: the command lines it runs, listed in every mode. Selecting any Ray
stage selects ``ray-up`` and ``ray-down`` with it (``with_cluster``).
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
        ray: It goes through Ray (skipped where Ray does not import).
    """

    name: str
    title: str
    module: str
    timeout_s: float
    quick_timeout_s: float
    min_s: float = 20.0
    ray: bool = False

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
    StageSpec(
        "flight-nccl",
        "the Flight Recorder on NCCL and NCCL's RAS, read as a stall reads them",
        "flight_nccl",
        60,
        45,
    ),
    StageSpec("ray-up", "rtk up --local: Ray registers the GPU", "with_ray.up", 90, 90, ray=True),
    StageSpec(
        "ray-preflight",
        "rtk preflight --local --load: GPU checks and GEMM through Ray",
        "with_ray.preflight",
        120,
        90,
        ray=True,
    ),
    StageSpec(
        "ray-train",
        "rtk train --local per strategy, rtk report, against the loop without Ray",
        "with_ray.train",
        360,
        300,
        min_s=60.0,
        ray=True,
    ),
    StageSpec(
        "ray-mfu",
        "DDP 350M bf16 compiled through rtk train: MFU, compile time",
        "with_ray.mfu",
        330,
        270,
        min_s=60.0,
        ray=True,
    ),
    StageSpec(
        "ray-torchrun",
        "rtk torchrun --local --auto-steps of a plain DDP script on NCCL, rtk report",
        "with_ray.torchrun",
        150,
        120,
        ray=True,
    ),
    StageSpec(
        "ray-record",
        "rtk telemetry record around a plain PyTorch script, rtk report",
        "with_ray.record",
        120,
        90,
        ray=True,
    ),
    StageSpec(
        "ray-profile",
        "rtk profile over two power limits, then the limits restored",
        "with_ray.profile",
        200,
        160,
        min_s=60.0,
        ray=True,
    ),
    StageSpec(
        "ray-power",
        "rtk train --power-policy optimize against the default limit, 350M bf16",
        "with_ray.power_policy",
        560,
        480,
        min_s=120.0,
        ray=True,
    ),
    StageSpec(
        "zeus-power",
        "Zeus's GlobalPowerLimitOptimizer on the same 350M model, without Ray",
        "zeus_power",
        240,
        150,
        min_s=40.0,
    ),
    StageSpec(
        "ray-down", "rtk down --local leaves no Ray process", "with_ray.down", 90, 90, ray=True
    ),
)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
RAY_STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES if s.ray)
RAY_UP = "ray-up"
RAY_DOWN = "ray-down"
SETUP = "setup"  # the install before the stages: a line of the essentials' plan, no stage

# ``--essentials``: what a GPU machine lent for one 10-minute command must run, in
# order of value, each with its own budget in seconds (the install first). Together at
# most ESSENTIALS_TOTAL_S; rtk's path through Ray first, what ran on 2026-11-26 (sensor,
# energy, the strategies without Ray) not again. A stage that finishes early leaves its
# time to the next; one that no longer fits is skipped with the command that runs it.
# The budgets as the H200 ran them on 2026-11-28 (seconds): setup 17, ray-up 15,
# ray-train 128, ray-torchrun 49, ray-power 152 (cut short), zeus-power 37, ray-mfu 67
# (cut short), ray-down 4.
ESSENTIALS: tuple[tuple[str, float], ...] = (
    (SETUP, 30.0),
    ("ray-up", 35.0),
    ("ray-train", 125.0),
    ("ray-torchrun", 55.0),
    ("ray-power", 140.0),
    ("zeus-power", 45.0),
    ("ray-mfu", 95.0),
    ("ray-down", 15.0),
)
ESSENTIALS_TOTAL_S = 540.0
ESSENTIAL_STRATEGIES = ("ddp", "fsdp2")  # DeepSpeed stays out of the one-command run


def with_cluster(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` in the fixed order, with ``ray-up`` and ``ray-down`` when a Ray stage is in."""
    chosen = set(names)
    if any(by_name(n).ray for n in chosen):
        chosen |= {RAY_UP, RAY_DOWN}
    return tuple(n for n in STAGE_NAMES if n in chosen)


def by_name(name: str) -> StageSpec:
    """The stage called ``name``.

    Raises:
        KeyError: No such stage.
    """
    for spec in STAGES:
        if spec.name == name:
            return spec
    raise KeyError(name)
