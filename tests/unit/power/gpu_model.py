"""A model of GPUs' step time and power against their power limits, for the controllers.

One GPU (``GpuModel``): its compute time per step is ``work_s / speed(limit_w)``, its
speed a piecewise-linear function of the limit with three regimes:

- at or above ``saturation_w`` the limit does not bind: full speed (1.0), and the GPU
  draws ``saturation_w`` while it computes (a higher limit changes nothing);
- between ``knee_w`` and ``saturation_w`` the work is memory-bound: lower clocks cost
  little, the speed falls linearly to ``knee_speed`` at the knee;
- below the knee it is compute-bound: the speed falls linearly to 0 at ``floor_w``
  (the static power, where no clock is left).

While computing it draws ``min(limit_w, saturation_w)``; while it waits (at the step's
collective for a slower GPU, or the communication itself) ``idle_w``. So the energy of
its compute, ``limit_w * work_s / speed``, falls as the limit falls through the
memory-bound regime and rises again below the knee: its minimum is at the knee.

A run (``RunModel``): the step time is the slowest GPU's compute time plus a fixed
communication time, and every other GPU waits the difference at the collective. Its
measured windows (``window``) carry seeded Gaussian noise: ``noise`` is the relative
spread of one step, so a window of n steps spreads ``noise / sqrt(n)`` (its mean), on
the step time, each GPU's energy and each GPU's wait.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace

from toolkit.power.windows import Controller, Decision, GpuKey, GpuRange, Window

H100 = GpuRange(min_w=200.0, max_w=700.0, default_w=700.0)


@dataclass(frozen=True)
class GpuModel:
    """One GPU's compute time and power against its limit (see the module)."""

    work_s: float = 0.30
    saturation_w: float = 600.0
    knee_w: float = 400.0
    knee_speed: float = 0.85
    floor_w: float = 100.0
    idle_w: float = 80.0

    def speed(self, limit_w: float) -> float:
        """Work done per second against full speed (1.0), at ``limit_w``."""
        if limit_w >= self.saturation_w:
            return 1.0
        if limit_w >= self.knee_w:
            share = (self.saturation_w - limit_w) / (self.saturation_w - self.knee_w)
            return 1.0 - (1.0 - self.knee_speed) * share
        return self.knee_speed * max(0.0, limit_w - self.floor_w) / (self.knee_w - self.floor_w)

    def compute_s(self, limit_w: float) -> float:
        """Seconds of compute per step at ``limit_w``."""
        return self.work_s / self.speed(limit_w)

    def compute_power_w(self, limit_w: float) -> float:
        """Watts drawn while computing at ``limit_w``."""
        return min(limit_w, self.saturation_w)


@dataclass(frozen=True)
class Step:
    """One noiseless step of a run: its time, and each GPU's energy and wait."""

    step_s: float
    energy_j: Mapping[GpuKey, float]
    wait_s: Mapping[GpuKey, float]

    @property
    def total_energy_j(self) -> float:
        """Every GPU's energy in the step."""
        return sum(self.energy_j.values())


@dataclass(frozen=True)
class RunModel:
    """GPUs in one data-parallel run: a step ends when the slowest GPU is done."""

    gpus: Mapping[GpuKey, GpuModel]
    ranges: Mapping[GpuKey, GpuRange]
    comm_s: float = 0.05
    noise: float = 0.02

    def step(self, limits_w: Mapping[GpuKey, float]) -> Step:
        """The noiseless step at ``limits_w``."""
        compute_s = {key: gpu.compute_s(limits_w[key]) for key, gpu in self.gpus.items()}
        slowest_s = max(compute_s.values())
        step_s = slowest_s + self.comm_s
        energy_j = {
            key: gpu.compute_power_w(limits_w[key]) * compute_s[key]
            + gpu.idle_w * (step_s - compute_s[key])
            for key, gpu in self.gpus.items()
        }
        wait_s = {key: slowest_s - compute_s[key] for key in self.gpus}
        return Step(step_s, energy_j, wait_s)

    def common_step(self, grid_w: float) -> Step:
        """The noiseless step with every GPU at ``grid_w`` clamped into its range."""
        return self.step({key: r.clamp(grid_w) for key, r in self.ranges.items()})

    def window(self, limits_w: Mapping[GpuKey, float], steps: int, rng: random.Random) -> Window:
        """A measured window of ``steps`` steps at ``limits_w``, with noise from ``rng``."""
        step = self.step(limits_w)
        spread = self.noise / math.sqrt(steps)
        step_s = step.step_s * (1.0 + rng.gauss(0.0, spread))
        energy_j = {
            key: steps * joules * (1.0 + rng.gauss(0.0, spread))
            for key, joules in step.energy_j.items()
        }
        wait_s = {
            key: max(0.0, wait + rng.gauss(0.0, spread * step.step_s))
            for key, wait in step.wait_s.items()
        }
        return Window(dict(limits_w), steps, step_s, energy_j, wait_s)


def cluster(
    nodes: int,
    gpus_per_node: int,
    *,
    slower: Mapping[GpuKey, float] | None = None,
    gpu_range: GpuRange = H100,
    model: GpuModel | None = None,
    noise: float = 0.02,
) -> RunModel:
    """``nodes`` x ``gpus_per_node`` alike GPUs; ``slower`` GPUs do more work (factor)."""
    base = model or GpuModel()
    gpus = {}
    for node in range(nodes):
        for index in range(gpus_per_node):
            key = GpuKey(f"node{node}", index)
            factor = (slower or {}).get(key, 1.0)
            gpus[key] = replace(base, work_s=base.work_s * factor)
    return RunModel(gpus, {key: gpu_range for key in gpus}, noise=noise)


@dataclass(frozen=True)
class Drive:
    """A controller driven against a run: each window and the decision it answered.

    ``decisions[0]`` is ``start()``'s; ``windows[i]`` was measured at
    ``decisions[i]``'s limits and answered by ``decisions[i + 1]``.
    """

    decisions: tuple[Decision, ...]
    windows: tuple[Window, ...]


def drive(
    controller: Controller, run: RunModel, seed: int, *, after_settled: int = 2, most: int = 200
) -> Drive:
    """Feed ``controller`` windows of ``run`` until it settled (and ``after_settled`` more)."""
    rng = random.Random(seed)
    decisions = [controller.start()]
    windows: list[Window] = []
    left = after_settled
    while left >= 0 and len(windows) < most:
        decision = decisions[-1]
        windows.append(run.window(decision.limits_w, decision.steps, rng))
        decisions.append(controller.observe(windows[-1]))
        if decisions[-1].settled:
            left -= 1
    assert decisions[-1].settled, f"not settled after {most} windows: {decisions[-1].reason}"
    return Drive(tuple(decisions), tuple(windows))
