"""The run to generate: its size, rates and faults (``SynthSpec``), and its steps (``Plan``).

Times are seconds on the head's timeline since the head's sampler started; a node's
wall clock is ``T0_WALL_S + t + offset_s(node)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

T0_WALL_S = 1_795_250_000.0  # the head's wall clock when its sampler starts
FAULTS = ("slow-gpu", "lost-sampler", "skewed-clock", "straggler")
BARRIER_LATENCY_S = 0.004

# What a rank's GPU is doing.
IDLE, PIPELINE, COMPUTE, WAIT, SLEEP = range(5)


@dataclass(frozen=True)
class Faults:
    """What goes wrong, and where (node and GPU indexes from 0; None: nothing)."""

    slow_gpu: tuple[int, int] | None = None
    slow_power_factor: float = 1.15
    lost_node: int | None = None
    lost_at_fraction: float = 0.6
    skewed_node: int | None = None
    skew_s: float = 2.5
    straggler_rank: int | None = None
    straggle_s: float = 0.3

    @classmethod
    def named(cls, names: Sequence[str], nodes: int, gpus: int) -> Faults:
        """The faults ``names`` (see FAULTS), each on the next non-head node in turn."""
        unknown = sorted(set(names) - set(FAULTS))
        if unknown:
            raise ValueError(f"unknown fault(s) {unknown}; valid: {', '.join(FAULTS)}")
        others = list(range(1, nodes)) or [0]
        where = {name: others[i % len(others)] for i, name in enumerate(FAULTS)}
        if "skewed-clock" in names and nodes < 2:
            raise ValueError(
                "skewed-clock needs 2 nodes or more (the head's clock is the reference)"
            )
        return cls(
            slow_gpu=(where["slow-gpu"], min(3, gpus - 1)) if "slow-gpu" in names else None,
            lost_node=where["lost-sampler"] if "lost-sampler" in names else None,
            skewed_node=where["skewed-clock"] if "skewed-clock" in names else None,
            straggler_rank=where["straggler"] * gpus + gpus // 2 if "straggler" in names else None,
        )


@dataclass(frozen=True)
class SynthSpec:
    """The run to generate.

    Attributes:
        step_s: From one step_begin to the next without a barrier: 95% compute, 5%
            input pipeline (each step varies by about 2%).
        seconds: How long every sampler runs; the run sits inside, ``lead_s`` after
            the start and ending at least ``lead_s`` before the end.
    """

    nodes: int = 4
    gpus: int = 8
    seconds: float = 900.0
    rate_hz: float = 10.0
    power_rate_hz: float | None = None
    step_s: float = 1.0
    barrier_every: int = 10
    tokens_per_rank: int = 1 << 16  # per step: batch x sequence on one rank
    seed: int = 0
    faults: Faults = field(default_factory=Faults)

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus < 1:
            raise ValueError(f"nodes and gpus must be at least 1, got {self.nodes}, {self.gpus}")
        if self.rate_hz <= 0 or (self.power_rate_hz or self.rate_hz) < self.rate_hz:
            raise ValueError("rate_hz must be > 0 and power_rate_hz at least rate_hz")
        if self.seconds < 8 * self.step_s + 2:
            raise ValueError(f"seconds={self.seconds} is too short for step_s={self.step_s}")

    @property
    def tick_hz(self) -> float:
        return self.power_rate_hz or self.rate_hz

    @property
    def full_every(self) -> int:
        return max(1, round(self.tick_hz / self.rate_hz))

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus

    @property
    def tokens_per_step(self) -> int:
        return self.tokens_per_rank * self.ranks

    @property
    def lead_s(self) -> float:
        return min(10.0, 0.05 * self.seconds)

    def node_name(self, index: int) -> str:
        return f"node{index + 1:03d}"

    def gpu_uuid(self, node: int, gpu: int) -> str:
        serial = (self.seed * 1_000_003 + node * 4096 + gpu + 1) * 2_654_435_761 % 2**32
        return f"GPU-{serial:08x}-{node:04x}-{gpu:04x}-8c1d-{self.seed % 2**48:012x}"

    def sampler_start_s(self, node: int) -> float:
        """When the node's sampler starts, on the head's timeline (samplers start apart)."""
        return (
            0.0 if node == 0 else float(np.random.default_rng([self.seed, 6, node]).uniform(0, 0.5))
        )

    def mono_base_s(self, node: int) -> float:
        """The node's monotonic clock when the head's sampler starts (its uptime)."""
        return 3600.0 * (node + 2) + float(
            np.random.default_rng([self.seed, 8, node]).uniform(0, 100)
        )

    def offset_s(self, node: int) -> float:
        """The node's wall clock minus the head's: NTP-like, or the skew."""
        if node == self.faults.skewed_node:
            return self.faults.skew_s
        if node == 0:
            return 0.0
        return float(np.random.default_rng([self.seed, 7, node]).normal(0.0, 0.002))


@dataclass
class Plan:
    """The steps on the head's timeline (seconds since the head's sampler started)."""

    run_start_s: float
    run_end_s: float
    begin_s: np.ndarray  # per step
    end_s: np.ndarray  # compute ends (all ranks together)
    barrier: np.ndarray  # per step: a barrier follows
    exit_s: np.ndarray  # barrier exit (= end_s without a barrier)

    @property
    def steps(self) -> int:
        return int(self.begin_s.size)

    def enter_s(self, rank: int, spec: SynthSpec) -> np.ndarray:
        """When ``rank`` enters each step's barrier (= end_s without one)."""
        late = spec.faults.straggle_s if rank == spec.faults.straggler_rank else 0.0
        return self.end_s + np.where(self.barrier, late, 0.0)

    def phase_bounds(self, rank: int, spec: SynthSpec) -> tuple[np.ndarray, np.ndarray]:
        """Times where ``rank``'s GPU changes phase, and the phase from there on."""
        straggler = rank == spec.faults.straggler_rank
        times = np.column_stack([self.begin_s, self.end_s, self.enter_s(rank, spec), self.exit_s])
        codes = np.tile([COMPUTE, SLEEP if straggler else WAIT, WAIT, PIPELINE], (self.steps, 1))
        bounds = np.concatenate([[-math.inf, self.run_start_s], times.ravel(), [self.run_end_s]])
        phases = np.concatenate([[IDLE, PIPELINE], codes.ravel(), [IDLE]])
        return bounds, phases


def plan_steps(spec: SynthSpec) -> Plan:
    """Steps of about ``step_s`` from ``lead_s + step_s`` until ``lead_s`` before the end."""
    rng = np.random.default_rng([spec.seed, 1])
    run_start = spec.lead_s
    last_end = spec.seconds - spec.lead_s - spec.step_s
    straggle = spec.faults.straggle_s if spec.faults.straggler_rank is not None else 0.0
    begin, end, barrier, exit_ = [], [], [], []
    t = run_start + spec.step_s
    step = 1
    while True:
        compute = 0.95 * spec.step_s * float(np.clip(rng.normal(1.0, 0.02), 0.9, 1.1))
        has_barrier = spec.barrier_every > 0 and step % spec.barrier_every == 0
        leave = t + compute + (straggle + BARRIER_LATENCY_S if has_barrier else 0.0)
        if leave > last_end:
            break
        begin.append(t)
        end.append(t + compute)
        barrier.append(has_barrier)
        exit_.append(leave)
        t = leave + 0.05 * spec.step_s
        step += 1
    return Plan(
        run_start_s=run_start,
        run_end_s=exit_[-1] + 0.01,
        begin_s=np.array(begin),
        end_s=np.array(end),
        barrier=np.array(barrier, dtype=bool),
        exit_s=np.array(exit_),
    )
