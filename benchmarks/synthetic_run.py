"""Synthetic run directories at cluster scale, in the documented layout (docs/telemetry.md).

``generate(out_dir, SynthSpec(...), "arrow")`` writes what ``rtk train --telemetry``
leaves after collection: ``telemetry/manifest.json``, one trace per node
(``telemetry/nodes/<node>/trace-001.arrows``, or the legacy ``samples.jsonl`` with
``fmt="jsonl"``), ``markers/rank-NNNNN.jsonl`` for every rank (one rank per GPU) and
rank 0's ``metrics.jsonl``. It returns the truth the files were made from.

The model: every node samples a host device and G GPUs at ``rate_hz`` (full readings)
and, optionally, the GPUs' power alone at a faster ``power_rate_hz``, on its own tick
grid and its own wall clock (``offset_s`` from the head's, recorded in the manifest as
measured). Each GPU's power, clocks, utilisation and throttle bits follow its rank's
phase: idle before ``run_start`` and after ``run_end``, compute between ``step_begin``
and ``step_end``, the input pipeline between steps, waiting inside a barrier every
``barrier_every`` steps. The energy counter integrates the sampled power tick by tick.

Faults (``--faults``), each on its own node where there are enough nodes:

- ``slow-gpu``: one GPU draws 15% more power while computing, at lower SM clocks, runs
  hotter, with ``sw_power_cap | sw_thermal`` throttle bits set.
- ``lost-sampler``: a node's trace stops at 60% of the run; manifest status ``lost``.
- ``skewed-clock``: a node's wall clock runs ``skew_s`` ahead (samples and markers),
  recorded in the manifest as measured.
- ``straggler``: one rank sleeps ``straggle_s`` before every barrier; every other rank
  waits for it. Each rank writes ``barrier_enter`` before a barrier and ``barrier``
  (with ``wait_s``) after it.

Samples are built column by column with numpy, node by node, in batches of about
``COMPACT_ROWS`` rows, so memory stays bounded at any size and duration.

    python benchmarks/synthetic_run.py OUT_DIR --nodes 4 --gpus 8 --seconds 900 \\
        --rate-hz 10 [--power-rate-hz 50] [--format arrow|jsonl] \\
        [--faults slow-gpu,lost-sampler,skewed-clock,straggler] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from toolkit.rundir import Manifest, MetricsLine, NodeManifest, RunDir
from toolkit.rundir.traces import COMPACT_ROWS, LEGACY_SAMPLES, READINGS, SCHEMA, next_segment
from toolkit.telemetry.sensors.host import model_power_w

T0_WALL_S = 1_795_250_000.0  # the head's wall clock when its sampler starts
FAULTS = ("slow-gpu", "lost-sampler", "skewed-clock", "straggler")
FORMATS = ("arrow", "jsonl")
BARRIER_ENTER = "barrier_enter"

# GPU phases and what a GPU does in each (H100 SXM-like figures).
IDLE, PIPELINE, COMPUTE, WAIT, SLEEP = range(5)
POWER_W = np.array([72.0, 210.0, 610.0, 265.0, 115.0])
SM_CLOCK_MHZ = np.array([345.0, 1980.0, 1980.0, 1980.0, 1980.0])
GPU_UTIL_PCT = np.array([0.0, 30.0, 100.0, 100.0, 0.0])
MEM_UTIL_PCT = np.array([0.0, 10.0, 45.0, 5.0, 0.0])
REASONS = np.array([0x1, 0x0, 0x0, 0x0, 0x1])
NVLINK_KIB_PER_S = np.array([0.0, 1e4, 1.8e7, 4e6, 0.0])
SLOW_REASONS = 0x4 | 0x20  # sw_power_cap | sw_thermal
SLOW_SM_CLOCK_MHZ = 1755.0
POWER_LIMIT_W = 700.0
GPU_MEMORY_BYTES = 85_520_809_984
HOST_MEMORY_BYTES = 1_081_965_510_656
HOST_CPUS = 96
BARRIER_LATENCY_S = 0.004
TEMPERATURE_TAU_S = 90.0

_INTEGER_READINGS = frozenset(
    {
        "nvml_ts_us",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "temperature_c",
        "gpu_util_pct",
        "mem_util_pct",
        "memory_used_bytes",
        "memory_total_bytes",
        "clocks_event_reasons",
        "pcie_tx_kbs",
        "pcie_rx_kbs",
        "nvlink_tx_kib",
        "nvlink_rx_kib",
    }
)
_KINDS = ("host", "gpu", "gpu_power")
_WRITE_OPTIONS = ipc.IpcWriteOptions(compression="zstd")


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
    tokens_per_step: int = 1 << 19
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
    def lead_s(self) -> float:
        return min(10.0, 0.05 * self.seconds)

    def node_name(self, index: int) -> str:
        return f"node{index + 1:03d}"

    def gpu_uuid(self, node: int, gpu: int) -> str:
        serial = (self.seed * 1_000_003 + node * 4096 + gpu) * 2_654_435_761 % 2**32
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


@dataclass
class NodeTruth:
    """What a node's trace holds, counted as it was written.

    Attributes:
        gpu_energy_j: Per GPU, the energy between its first and last full reading
            (what the counter's delta must be), summed from the sampled power.
        host_energy_j: The host's, likewise.
    """

    name: str
    offset_s: float
    samples: int = 0
    first_wall_s: float | None = None
    last_wall_s: float | None = None
    sampled_s: float = 0.0
    gpu_energy_j: np.ndarray = field(default_factory=lambda: np.zeros(0))
    host_energy_j: float = 0.0
    trace: Path | None = None


@dataclass
class SynthRun:
    """A generated run directory and the truth behind it."""

    run_dir: Path
    spec: SynthSpec
    fmt: str
    plan: Plan
    nodes: list[NodeTruth]
    seconds_taken: float = 0.0

    @property
    def samples(self) -> int:
        return sum(n.samples for n in self.nodes)

    @property
    def trace_bytes(self) -> int:
        return sum(n.trace.stat().st_size for n in self.nodes if n.trace is not None)

    @property
    def node_hours(self) -> float:
        return sum(n.sampled_s for n in self.nodes) / 3600.0


@dataclass
class Chunk:
    """Consecutive samples of one node: the row's slot (0 host, 1.. GPUs), kind, readings."""

    slot: np.ndarray
    kind: np.ndarray
    columns: dict[str, np.ndarray]  # NaN: the sample has no such reading

    @property
    def rows(self) -> int:
        return int(self.slot.size)


class _NodeSampler:
    """One node's samples, chunk by chunk, with the counters carried across chunks."""

    def __init__(self, spec: SynthSpec, plan: Plan, node: int) -> None:
        self.spec, self.plan, self.node = spec, plan, node
        g = spec.gpus
        self.rng = np.random.default_rng([spec.seed, 2, node])
        self.dt = 1.0 / spec.tick_hz
        self.start_s = spec.sampler_start_s(node)
        stop_s = spec.seconds
        if node == spec.faults.lost_node:
            stop_s = spec.faults.lost_at_fraction * spec.seconds
        self.ticks = int(math.floor((stop_s - self.start_s) * spec.tick_hz))
        self.offset_s = spec.offset_s(node)
        self.mono_base_s = spec.mono_base_s(node)
        ranks = range(node * g, (node + 1) * g)
        self.bounds = [plan.phase_bounds(rank, spec) for rank in ranks]
        self.factor = 1.0 + self.rng.normal(0.0, 0.02, g)
        self.temp_offset_c = self.rng.normal(0.0, 1.5, g)
        self.slow = np.zeros(g, dtype=bool)
        if spec.faults.slow_gpu is not None and spec.faults.slow_gpu[0] == node:
            self.slow[spec.faults.slow_gpu[1]] = True
        self.energy_j = self.rng.uniform(1e7, 1e8, g).round(3)  # since driver load
        self.nvlink_kib = self.rng.uniform(1e9, 1e10, g).round()
        self.host_energy_j = 0.0
        self._host_read = False
        self.truth = NodeTruth(spec.node_name(node), self.offset_s, gpu_energy_j=np.zeros(g))
        self._tail_j = np.zeros(g)  # energy since the latest full reading

    def chunks(self) -> Iterator[Chunk]:
        fe = self.spec.full_every
        rows_per_tick = (self.spec.gpus * fe + 1) / fe
        per_chunk = max(fe, int(COMPACT_ROWS / rows_per_tick) // fe * fe)
        for k0 in range(0, self.ticks, per_chunk):
            yield self._chunk(np.arange(k0, min(k0 + per_chunk, self.ticks)))
        self.truth.gpu_energy_j -= self._tail_j

    def _chunk(self, k: np.ndarray) -> Chunk:
        spec, rng, g, n = self.spec, self.rng, self.spec.gpus, k.size
        t = self.start_s + k * self.dt  # head timeline
        full = k % spec.full_every == 0
        phase = np.column_stack(
            [p[np.searchsorted(b, t, side="right") - 1] for b, p in self.bounds]
        )
        level = POWER_W[phase] * self.factor
        level = np.where(
            self.slow & (phase == COMPUTE), level * spec.faults.slow_power_factor, level
        )
        power = np.minimum(level * rng.normal(1.0, 0.015, (n, g)), POWER_LIMIT_W).round(3)
        step_j = power * self.dt
        counter = self.energy_j + np.cumsum(step_j, axis=0) - step_j  # at each tick's start
        self.energy_j = self.energy_j + step_j.sum(axis=0)
        self._account(step_j, full)
        nvlink = self.nvlink_kib + np.cumsum(NVLINK_KIB_PER_S[phase] * self.dt, axis=0)
        self.nvlink_kib = nvlink[-1]
        running = (t >= self.plan.run_start_s) & (t < self.plan.run_end_s)

        cols = {name: np.full((n, g + 1), np.nan) for name in READINGS}
        gpu_lat = np.where(full, 0.002, 0.0005) + rng.uniform(0.0, 0.003, n)
        host_lat = 0.0004 + rng.uniform(0.0, 0.0006, n)
        lat = np.column_stack([host_lat, np.repeat(gpu_lat[:, None], g, axis=1)])
        wall = T0_WALL_S + self.offset_s + t[:, None] + lat
        mono = self.mono_base_s + t[:, None] + lat
        gpus = {name: cols[name][:, 1:] for name in cols}  # views
        gpus["power_w"][:] = power
        gpus["nvml_ts_us"][:] = np.floor((wall[:, 1:] - 0.0004) * 1e6)
        f = full
        gpus["energy_j"][f] = counter[f].round(3)
        gpus["power_limit_w"][f] = POWER_LIMIT_W
        sm = np.where(self.slow & (phase != IDLE), SLOW_SM_CLOCK_MHZ, SM_CLOCK_MHZ[phase])
        gpus["sm_clock_mhz"][f] = sm[f]
        gpus["mem_clock_mhz"][f] = 2619.0
        gpus["temperature_c"][f] = self._temperature(t, rng)[f]
        gpus["gpu_util_pct"][f] = GPU_UTIL_PCT[phase[f]]
        gpus["mem_util_pct"][f] = MEM_UTIL_PCT[phase[f]]
        used = np.where(running[:, None], 61.5 * 2**30 + 2**20 * np.arange(g), 0.55 * 2**30)
        gpus["memory_used_bytes"][f] = np.floor(used[f])
        gpus["memory_total_bytes"][f] = GPU_MEMORY_BYTES
        reasons = np.where(self.slow & (phase == COMPUTE), SLOW_REASONS, REASONS[phase])
        gpus["clocks_event_reasons"][f] = reasons[f]
        pcie = (k // spec.full_every)[:, None] % g == np.arange(g)  # one GPU per read
        pcie &= full[:, None]
        pcie_kbs = np.where(phase == COMPUTE, 1.2e5, 2e3) * rng.uniform(0.8, 1.2, (n, g))
        gpus["pcie_tx_kbs"][pcie] = np.floor(pcie_kbs[pcie])
        gpus["pcie_rx_kbs"][pcie] = np.floor(pcie_kbs[pcie] * 1.7)
        gpus["nvlink_tx_kib"][f] = np.floor(nvlink[f])
        gpus["nvlink_rx_kib"][f] = np.floor(nvlink[f] * 1.0003)

        host = {name: cols[name][:, 0] for name in cols}  # views
        util = np.where(running, rng.normal(35.0, 3.0, n), rng.normal(1.5, 0.5, n))
        util = util.clip(0.1, 100.0).round(2)
        host_w = np.asarray(model_power_w(HOST_CPUS, util[f])).round(3)  # type: ignore[arg-type]
        host_j = host_w * self.dt * spec.full_every  # the model counts each reading's interval
        host_energy = self.host_energy_j + np.cumsum(host_j)
        self.host_energy_j = float(host_energy[-1]) if host_energy.size else self.host_energy_j
        host["cpu_util_pct"][f] = util[f]
        host["memory_used_bytes"][f] = np.floor(HOST_MEMORY_BYTES * 0.17 + rng.normal(0, 2**24, n))[
            f
        ]
        host["memory_total_bytes"][f] = HOST_MEMORY_BYTES
        host["power_w"][f] = host_w
        host["energy_j"][f] = host_energy
        self._account_host(host_j)

        valid = np.ones((n, g + 1), dtype=bool)
        valid[:, 0] = full
        slot = np.broadcast_to(np.arange(g + 1), (n, g + 1))[valid]
        kind = np.where(
            slot == 0, 0, np.where(np.broadcast_to(full[:, None], valid.shape)[valid], 1, 2)
        )
        columns = {name: values[valid] for name, values in cols.items()}
        columns["wall_s"], columns["mono_s"] = wall[valid], mono[valid]
        chunk = Chunk(slot=slot, kind=kind, columns=columns)
        self._count(chunk)
        return chunk

    def _temperature(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        start, end = self.plan.run_start_s, self.plan.run_end_s
        reached = 1.0 - np.exp(-(end - start) / TEMPERATURE_TAU_S)
        heat = np.where(
            t < start,
            0.0,
            np.where(
                t < end,
                1.0 - np.exp(-(t - start) / TEMPERATURE_TAU_S),
                reached * np.exp(-(t - end) / TEMPERATURE_TAU_S),
            ),
        )
        rise = 36.0 + 12.0 * self.slow
        noise = rng.normal(0.0, 0.4, (t.size, self.spec.gpus))
        return (31.0 + self.temp_offset_c + rise * heat[:, None] + noise).round()

    def _account(self, step_j: np.ndarray, full: np.ndarray) -> None:
        """Energy between the first and the latest full reading, summed a second way."""
        self.truth.gpu_energy_j += step_j.sum(axis=0)
        last = np.flatnonzero(full)
        if last.size:
            self._tail_j = step_j[last[-1] :].sum(axis=0)
        else:
            self._tail_j = self._tail_j + step_j.sum(axis=0)

    def _account_host(self, step_j: np.ndarray) -> None:
        # The host's model counter includes each reading's own interval: its delta
        # between the first and the last reading leaves out the first reading's.
        if step_j.size:
            self.truth.host_energy_j += float(step_j[0 if self._host_read else 1 :].sum())
            self._host_read = True

    def _count(self, chunk: Chunk) -> None:
        truth = self.truth
        if chunk.rows:
            wall = chunk.columns["wall_s"]
            truth.first_wall_s = truth.first_wall_s or float(wall[0])
            truth.last_wall_s = float(wall.max())
            truth.sampled_s = truth.last_wall_s - truth.first_wall_s
        truth.samples += chunk.rows


def _arrow_batch(chunk: Chunk, devices: pa.Array) -> pa.RecordBatch:
    n = chunk.rows
    arrays: list[pa.Array] = []
    for f in SCHEMA:
        if f.name == "device":
            arrays.append(devices.take(pa.array(chunk.slot)))
        elif f.name == "kind":
            arrays.append(pa.array(_KINDS).take(pa.array(chunk.kind)))
        elif f.name == "power_source":
            names = pa.array(["model", "nvml_instant"])
            arrays.append(names.take(pa.array((chunk.slot > 0).astype(np.int8))))
        elif f.name == "extra":
            arrays.append(pa.nulls(n, pa.string()))
        else:
            values = chunk.columns[f.name]
            arrays.append(pa.array(values, type=pa.float64(), mask=np.isnan(values)))
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


_JSON_ORDER = (
    "power_w",
    "power_source",
    "nvml_ts_us",
    *(name for name in READINGS if name not in ("power_w", "nvml_ts_us")),
)


def _jsonl_lines(chunk: Chunk, devices: list[str]) -> Iterator[str]:
    """The samples as the JSON-lines sampler wrote them (absent readings left out)."""
    cols = {name: values.tolist() for name, values in chunk.columns.items()}
    for i, (slot, kind) in enumerate(zip(chunk.slot.tolist(), chunk.kind.tolist(), strict=True)):
        row: dict[str, object] = {
            "wall_s": cols["wall_s"][i],
            "mono_s": cols["mono_s"][i],
            "device": devices[slot],
            "kind": _KINDS[kind],
        }
        for name in _JSON_ORDER:
            if name == "power_source":
                row[name] = "model" if slot == 0 else "nvml_instant"
                continue
            value = cols[name][i]
            if value == value:  # not NaN
                row[name] = int(value) if name in _INTEGER_READINGS else value
        yield json.dumps(row) + "\n"


def write_node_trace(node_dir: Path, spec: SynthSpec, plan: Plan, node: int, fmt: str) -> NodeTruth:
    """Write node ``node``'s trace under ``node_dir`` in ``fmt``; what it holds."""
    node_dir.mkdir(parents=True, exist_ok=True)
    sampler = _NodeSampler(spec, plan, node)
    names = ["host", *(spec.gpu_uuid(node, g) for g in range(spec.gpus))]
    if fmt == "arrow":
        path = next_segment(node_dir)
        devices = pa.array(names)
        with path.open("wb") as out, ipc.new_stream(out, SCHEMA, options=_WRITE_OPTIONS) as w:
            for chunk in sampler.chunks():
                w.write_batch(_arrow_batch(chunk, devices))
    elif fmt == "jsonl":
        path = node_dir / LEGACY_SAMPLES
        with path.open("w", encoding="utf-8") as out:
            for chunk in sampler.chunks():
                out.writelines(_jsonl_lines(chunk, names))
    else:
        raise ValueError(f"format {fmt!r}: valid: {', '.join(FORMATS)}")
    sampler.truth.trace = path
    return sampler.truth


def _node_manifest(spec: SynthSpec, node: int, truth: NodeTruth) -> NodeManifest:
    lost = node == spec.faults.lost_node
    clock = {"offset_s": truth.offset_s, "uncertainty_s": 0.00012}
    devices: dict[str, dict[str, object]] = {
        "host": {
            "kind": "host",
            "cpus": HOST_CPUS,
            "power_source": "model",
            "energy_source": "model",
            "memory_total_bytes": HOST_MEMORY_BYTES,
        }
    }
    for g in range(spec.gpus):
        uuid = spec.gpu_uuid(node, g)
        devices[uuid] = {
            "kind": "gpu",
            "uuid": uuid,
            "nvml_index": g,
            "name": "NVIDIA H100 80GB HBM3",
            "serial": f"1652{node:05d}{g:04d}",
            "memory_total_bytes": GPU_MEMORY_BYTES,
            "power_limit_w": POWER_LIMIT_W,
            "pci_bus_id": f"00000000:{0x18 + 0x10 * g:02X}:00.0",
            "unsupported": [],
        }
    return NodeManifest(
        name=truth.name,
        hostname=f"{truth.name}.cluster.internal",
        offset_s=truth.offset_s,
        uncertainty_s=0.00012,
        status="lost" if lost else "complete",
        devices=devices,  # type: ignore[arg-type]
        samples_expected=truth.samples,
        error="sampler process died (SIGKILL)" if lost else None,
        node_id=f"{spec.seed:08x}{node:048x}",
        pid=41000 + node,
        sensors=("host", "nvml"),
        clock={**clock, "start": {**clock, "rounds": 15}, "end": {**clock, "rounds": 15}},
        first_wall_s=truth.first_wall_s,
        last_wall_s=truth.last_wall_s,
        sampler=None if lost else {"samples": truth.samples, "late_ticks": 0, "errors": 0},
    )


def write_markers(run: RunDir, spec: SynthSpec, plan: Plan) -> None:
    """Every rank's marker file, as ``MarkerWriter`` writes it (formatted directly: fast)."""
    loss = (2.1 + 8.0 / (1.0 + np.arange(1, plan.steps + 1) / 40.0)).round(6).tolist()
    tokens = spec.tokens_per_step // spec.ranks
    barrier = plan.barrier.tolist()
    run.markers_dir.mkdir(parents=True, exist_ok=True)
    for rank in range(spec.ranks):
        node, local = divmod(rank, spec.gpus)
        name, offset = spec.node_name(node), spec.offset_s(node)
        mono_base = spec.mono_base_s(node)
        rng = np.random.default_rng([spec.seed, 3, rank])
        jitter = rng.uniform(0.0, 0.0005, (4, plan.steps))
        times = [plan.begin_s, plan.end_s, plan.enter_s(rank, spec), plan.exit_s]
        head = [t + j for t, j in zip(times, jitter, strict=True)]
        wall = [(T0_WALL_S + offset + h).tolist() for h in head]
        mono = [(mono_base + h).tolist() for h in head]
        who = (
            f'"node": "{name}", "hostname": "{name}.cluster.internal", "rank": {rank}, '
            f'"local_rank": {local}, "world_size": {spec.ranks}, '
            f'"gpu_uuid": "{spec.gpu_uuid(node, local)}", "pid": {52000 + rank}'
        )

        def line(event: str, step: int, w: float, m: float, extra: str = "", who: str = who) -> str:
            return (
                f'{{"v": 1, "event": "{event}", "step": {step}, "wall_s": {w!r}, '
                f'"mono_s": {m!r}, {who}{extra}}}\n'
            )

        lines = [
            line(
                "run_start",
                0,
                T0_WALL_S + offset + plan.run_start_s,
                mono_base + plan.run_start_s,
                ', "strategy": "ddp", "resumed": false',
            )
        ]
        for i in range(plan.steps):
            s = i + 1
            lines.append(line("step_begin", s, wall[0][i], mono[0][i]))
            lines.append(
                line(
                    "step_end",
                    s,
                    wall[1][i],
                    mono[1][i],
                    f', "loss": {loss[i]!r}, "tokens": {tokens}',
                )
            )
            if barrier[i]:
                lines.append(line(BARRIER_ENTER, s, wall[2][i], mono[2][i]))
                wait = mono[3][i] - mono[2][i]
                lines.append(line("barrier", s, wall[3][i], mono[3][i], f', "wait_s": {wait!r}'))
        lines.append(
            line(
                "run_end",
                plan.steps,
                T0_WALL_S + offset + plan.run_end_s,
                mono_base + plan.run_end_s,
            )
        )
        with run.marker(rank).open("w", encoding="utf-8") as out:
            out.writelines(lines)


def write_metrics(run: RunDir, spec: SynthSpec, plan: Plan) -> None:
    """Rank 0's metrics.jsonl: one line per step, timed as the trainer times it."""
    next_begin = np.append(plan.begin_s[1:], plan.run_end_s)
    step_s = plan.exit_s - plan.begin_s
    with run.metrics.open("w", encoding="utf-8") as out:
        for i in range(plan.steps):
            s = i + 1
            out.write(
                MetricsLine(
                    step=s,
                    loss=round(2.1 + 8.0 / (1.0 + s / 40.0), 6),
                    step_time_s=float(step_s[i]),
                    tokens=spec.tokens_per_step,
                    tokens_per_s=spec.tokens_per_step / float(step_s[i]),
                    lr=3e-4,
                    wall_s=T0_WALL_S + float(min(plan.exit_s[i] + 0.001, next_begin[i])),
                    mfu=0.41,
                ).to_line()
            )


def generate(out_dir: Path, spec: SynthSpec, fmt: str = "arrow") -> SynthRun:
    """Write the run directory ``out_dir`` (created; must be empty or absent)."""
    began = time.perf_counter()
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: valid: {', '.join(FORMATS)}")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty")
    run = RunDir(out_dir)
    plan = plan_steps(spec)
    nodes = [
        write_node_trace(run.nodes_dir / spec.node_name(i), spec, plan, i, fmt)
        for i in range(spec.nodes)
    ]
    Manifest(
        head=spec.node_name(0),
        rate_hz=spec.rate_hz,
        power_rate_hz=spec.tick_hz,
        nodes={n.name: _node_manifest(spec, i, n) for i, n in enumerate(nodes)},
        run_dir=str(out_dir),
        started_wall_s=T0_WALL_S,
        ended_wall_s=T0_WALL_S + spec.seconds,
    ).write(run.manifest)
    write_markers(run, spec, plan)
    write_metrics(run, spec, plan)
    return SynthRun(out_dir, spec, fmt, plan, nodes, time.perf_counter() - began)


def parse_args(argv: Sequence[str] | None = None) -> tuple[Path, SynthSpec, str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="the run directory to create")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs (and ranks) per node")
    parser.add_argument("--seconds", type=float, default=900.0, help="how long sampling runs")
    parser.add_argument("--rate-hz", type=float, default=10.0, help="full readings per second")
    parser.add_argument("--power-rate-hz", type=float, default=None, help="fast GPU power rate")
    parser.add_argument("--step-s", type=float, default=1.0)
    parser.add_argument("--barrier-every", type=int, default=10)
    parser.add_argument("--format", choices=FORMATS, default="arrow")
    parser.add_argument("--faults", default="", help=f"comma-separated: {','.join(FAULTS)}")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    names = [name for name in args.faults.split(",") if name]
    spec = SynthSpec(
        nodes=args.nodes,
        gpus=args.gpus,
        seconds=args.seconds,
        rate_hz=args.rate_hz,
        power_rate_hz=args.power_rate_hz,
        step_s=args.step_s,
        barrier_every=args.barrier_every,
        seed=args.seed,
        faults=Faults.named(names, args.nodes, args.gpus),
    )
    return args.out_dir, spec, args.format


def main(argv: Sequence[str] | None = None) -> int:
    try:
        out_dir, spec, fmt = parse_args(argv)
        run = generate(out_dir, spec, fmt)
    except (ValueError, FileExistsError) as e:
        print(f"synthetic_run: {e}", file=sys.stderr)
        return 2
    mb = run.trace_bytes / 1e6
    print(
        f"{out_dir}: {spec.nodes} nodes x {spec.gpus} GPUs x {spec.seconds:g} s, "
        f"{run.samples:,} samples, {run.plan.steps} steps, traces {mb:.1f} MB "
        f"({mb / max(run.node_hours, 1e-9):.1f} MB per node-hour, {fmt}), "
        f"{run.seconds_taken:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
