"""``StageContext``: what every stage process is told (the options and the machine)."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The five training strategies stage 4 runs, as NAME -> rtk train options.
STRATEGIES: dict[str, dict[str, Any]] = {
    "ddp": {"strategy": "ddp"},
    "fsdp2": {"strategy": "fsdp2"},
    "zero2": {"strategy": "deepspeed", "zero_stage": 2},
    "zero3": {"strategy": "deepspeed", "zero_stage": 3},
    "zero3-offload": {"strategy": "deepspeed", "zero_stage": 3, "offload_optimizer": True},
}


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML (or nvidia-smi) listed it."""

    index: int
    uuid: str
    name: str


@dataclass(frozen=True)
class StageContext:
    """Options and machine facts, as a stage process reads them.

    Attributes:
        repo: The repository root (rtk's checkout).
        work: A scratch directory for run directories and temporary files.
        python: The Python that runs rtk and the workloads.
        quick: Shorter windows and fewer steps (a smoke run).
        sensor_s: Seconds of each sensor window (idle, load).
        energy_s: Seconds of the energy-truth window.
        train_steps: Optimizer steps per training run.
        strategies: The strategies stage 4 trains with (names of ``STRATEGIES``).
        importable: Module name -> whether it imports in ``python``.
        gpus: The GPUs found.
        dry_run: Only describe what would run.
        stage_timeout_s: The time limit the runner gives the stage being run (0: none
            given); a stage that must clean up after a command (put GPU settings
            back) gives that command less, so the cleanup fits.
        essentials: The one-command run (``--essentials``): stages shorten what they
            run to fit their budgets (the power policy's runs, say).
    """

    repo: str
    work: str
    python: str
    quick: bool = False
    sensor_s: float = 20.0
    energy_s: float = 20.0
    train_steps: int = 40
    strategies: tuple[str, ...] = tuple(STRATEGIES)
    importable: dict[str, bool] = field(default_factory=dict)
    gpus: tuple[GpuInfo, ...] = ()
    dry_run: bool = False
    stage_timeout_s: float = 0.0
    essentials: bool = False

    @property
    def ray(self) -> bool:
        """Whether Ray imports, so rtk's own commands (``rtk train --local``) can run."""
        return self.importable.get("ray", False)

    def has(self, module: str) -> bool:
        """Whether ``module`` imports in the stages' Python."""
        return self.importable.get(module, False)

    @property
    def work_dir(self) -> Path:
        """``work`` as a path."""
        return Path(self.work)

    @property
    def restore_file(self) -> Path:
        """Where GPU settings changed by a stage are recorded to be put back."""
        return Path(self.work) / "gpu-restore.json"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment for rtk and workload processes: rtk and this package importable."""
        paths = [str(Path(self.repo) / "scripts"), self.repo]
        old = os.environ.get("PYTHONPATH")
        if old:
            paths.append(old)
        return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **extra}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        data = dataclasses.asdict(self)
        data["strategies"] = list(self.strategies)
        data["gpus"] = [dataclasses.asdict(g) for g in self.gpus]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StageContext:
        """The inverse of ``to_json``."""
        values = dict(data)
        values["strategies"] = tuple(values.get("strategies", STRATEGIES))
        values["gpus"] = tuple(GpuInfo(**g) for g in values.get("gpus", []))
        return cls(**values)

    def dump(self, path: Path) -> None:
        """Write the context for a stage process."""
        path.write_text(json.dumps(self.to_json()), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> StageContext:
        """Read what ``dump`` wrote."""
        return cls.from_json(json.loads(path.read_text(encoding="utf-8")))
