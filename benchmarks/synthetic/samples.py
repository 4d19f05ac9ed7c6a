"""One node's samples, built column by column with numpy, and written as a trace.

``write_node_trace`` writes a node's trace in batches of about ``COMPACT_ROWS`` rows
(an Arrow IPC stream in the project's ``SCHEMA``, zstd, as collection leaves it) or as
the legacy ``samples.jsonl`` (one JSON object per sample, as the old sampler wrote it).
Counters (GPU energy, NVLink, the host's modelled energy) carry across batches, so
memory stays bounded at any duration.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from synthetic.spec import COMPUTE, IDLE, T0_WALL_S, Plan, SynthSpec
from toolkit.rundir.trace_files import LEGACY_SAMPLES, next_segment
from toolkit.rundir.traces import COMPACT_ROWS, READINGS, SCHEMA
from toolkit.telemetry.sensors.host import model_power_w

FORMATS = ("arrow", "jsonl")

# What a GPU does in each phase (IDLE, PIPELINE, COMPUTE, WAIT, SLEEP), H100 SXM-like.
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
        base = 31.0 + self.temp_offset_c + 10.0 * self.slow  # its cooling is worse, idle too
        noise = rng.normal(0.0, 0.4, (t.size, self.spec.gpus))
        return (base + rise * heat[:, None] + noise).round()

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
