"""A model of a cluster's GPUs for the power driver: real marker files, no Ray, no NVML.

``ModelNodes`` stands for ``RayPowerNodes``: each GPU has a limit and an energy counter
that counts what the model draws. ``play`` plays a run step by step: each step takes
the time the model says for the limits in force, the counters count up, rank 0 writes
its ``step_end`` marker, and the driver polls (``tick``), as its thread would.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from toolkit.gpu.limits import GpuRestore
from toolkit.power.ask import NodeReport, RankGpu
from toolkit.power.driver import PowerDriver
from toolkit.power.node_power import GpuReading, NodePower
from toolkit.rundir import RunDir
from toolkit.stall.slow import RankSteps

MIN_W, MAX_W = 200.0, 700.0
COMM_S = 0.05


class ModelNodes:
    """GPUs whose compute time grows below a saturation limit; power is the limit, capped.

    ``work[(node, index)]`` scales a GPU's compute time (one slower GPU: a straggler).
    A step lasts the slowest GPU's compute plus ``COMM_S``; the others wait the rest,
    drawing ``IDLE_W``.
    """

    IDLE_W = 100.0
    SATURATION_W = 450.0  # above it the limit does not bind: compute is as fast as it gets
    DRAW_W = 600.0  # the most a computing GPU draws: above 450 W only for nothing

    def __init__(self, gpus: Mapping[str, int], work: Mapping[tuple[str, int], float] = {}):
        self.limits_w = {(n, i): MAX_W for n, count in gpus.items() for i in range(count)}
        self.work = {key: work.get(key, 1.0) for key in self.limits_w}
        self.energy_mj = dict.fromkeys(self.limits_w, 0.0)
        self.wall_s = 1000.0
        self.waits: dict[int, list[tuple[int, float]]] = {}  # rank -> (step, wait_s)
        self.asked: list[dict[str, dict[int, float]]] = []
        self.restored = 0
        self.refuse: str | None = None  # an error every set answers, when given

    def rank_of(self, key: tuple[str, int]) -> int:
        return sorted(self.limits_w).index(key)

    def compute_s(self, key: tuple[str, int]) -> float:
        limit = self.limits_w[key]
        return self.work[key] * 0.2 * max(1.0, self.SATURATION_W / limit) ** 1.5

    def step(self, step: int) -> float:
        """Play one step: its length; every counter counts what its GPU drew."""
        computes = {key: self.compute_s(key) for key in self.limits_w}
        step_s = max(computes.values()) + COMM_S
        for key, compute_s in computes.items():
            busy_w = min(self.limits_w[key], self.DRAW_W)
            joules = busy_w * compute_s + self.IDLE_W * (step_s - compute_s)
            self.energy_mj[key] += joules * 1000
            waits = self.waits.setdefault(self.rank_of(key), [])
            waits.append((step, step_s - COMM_S - compute_s))
        self.wall_s += step_s
        return step_s

    def ask(
        self, limits_w: Mapping[str, Mapping[int, float]], run_dir: str | None
    ) -> dict[str, NodeReport | str]:
        self.asked.append({n: dict(v) for n, v in limits_w.items()})
        errors: dict[str, tuple[str, ...]] = {}
        for node, limits in limits_w.items():
            for index, limit in limits.items():
                if self.refuse is not None:
                    errors[node] = (f"GPU {index}: {self.refuse}",)
                    continue
                self.limits_w[(node, index)] = limit
        answers: dict[str, NodeReport | str] = {}
        for node in sorted({n for n, _ in self.limits_w}):
            gpus = tuple(
                GpuReading(
                    index=i, uuid=f"GPU-{node}-{i}", energy_mj=int(self.energy_mj[(n, i)]),
                    limit_w=self.limits_w[(n, i)], min_w=MIN_W, max_w=MAX_W, default_w=MAX_W,
                )
                for (n, i) in sorted(self.limits_w)
                if n == node
            )  # fmt: skip
            power = NodePower(node, self.wall_s, gpus, errors.get(node, ()), True)
            ranks = tuple(
                RankSteps(
                    rank=self.rank_of((n, i)), node=node,
                    barrier_steps=tuple(s for s, _ in self.waits.get(self.rank_of((n, i)), [])),
                    barrier_wait_s=tuple(w for _, w in self.waits.get(self.rank_of((n, i)), [])),
                )
                for (n, i) in sorted(self.limits_w)
                if n == node
            )  # fmt: skip
            rank_gpus = tuple(
                RankGpu(self.rank_of((n, i)), i, f"GPU-{node}-{i}")
                for (n, i) in sorted(self.limits_w)
                if n == node
            )
            answers[node] = NodeReport(power, ranks if run_dir else (), rank_gpus)
        return answers

    def restore(self) -> dict[str, GpuRestore]:
        self.restored += 1
        for key in self.limits_w:
            self.limits_w[key] = MAX_W
        nodes = sorted({n for n, _ in self.limits_w})
        return {node: GpuRestore(node, done=(f"{node}: power_limit restored",)) for node in nodes}


def play(driver: PowerDriver, model: ModelNodes, run_dir: Path, steps: range) -> None:
    """Run ``steps``: each step's marker is written, then the driver polls."""
    path = RunDir(run_dir).marker(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    for step in steps:
        model.step(step)
        line = {"event": "step_end", "step": step, "wall_s": model.wall_s, "rank": 0, "node": "n0"}
        with path.open("a") as f:
            f.write(json.dumps(line) + "\n")
        driver.tick()
