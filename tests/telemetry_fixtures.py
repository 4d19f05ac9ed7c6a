"""Synthetic, format-exact run directories for the telemetry report (docs/telemetry.md).

``build_run(tmp_path, RunSpec(...))`` writes a run directory as rtk would leave it:
``telemetry/manifest.json``, ``telemetry/nodes/<node>/trace-001.arrows`` (or the
legacy ``samples.jsonl`` with ``trace_format="jsonl"``),
``markers/rank-NNNNN.jsonl`` and ``metrics.jsonl``, and returns the truth it was made
from (sample arrays on the head's timeline, step and barrier times) so tests compute
their expected figures from the same data.

Time runs in integer ticks of ``1 / tick_rate_hz`` (the faster of the two sample
rates) so every event and every sample falls exactly on the grid. Power is piecewise
constant per tick: ``busy_w`` while a step runs, ``idle_w`` otherwise, and the energy
counter adds ``power * tick`` per tick, so it is exact at every reading.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.rundir.traces import TraceWriter

T0_WALL_S = 1_795_250_000.0  # the head's wall clock at the first run_start


@dataclass
class NodeSpec:
    """One node: its devices, clock offset and what goes wrong with its sampler."""

    name: str
    offset_s: float = 0.0  # this node's wall clock minus the head's
    gpus: int = 1
    host: bool = True
    host_power_source: str = "model"  # "model" or "ipmi"
    host_rapl: bool = False  # the host also reports a RAPL energy counter
    ranks: int | None = None  # default: one per GPU, at least one
    lost_at_s: float | None = None  # run time at which the sampler dies (status "lost")
    gaps: list[tuple[float, float]] = field(default_factory=list)  # no samples inside
    counter_scale: float = 1.0  # the GPU counter counts scale x the power ...
    counter_scale_between: tuple[float, float] | None = None  # ... in this run-time span
    throttle: list[tuple[float, float, int]] = field(default_factory=list)  # from, to, bits
    # What its GPUs and host read while busy (idle: 345 MHz, 40 °C, 5% CPU).
    busy_sm_clock_mhz: float = 1980.0
    busy_temperature_c: float = 60.0
    power_limit_w: float = 700.0
    busy_cpu_util_pct: float = 90.0


@dataclass
class RunSpec:
    """The run: nodes, rates, the step schedule, and a restart if wanted."""

    nodes: list[NodeSpec]
    rate_hz: float = 10.0
    power_rate_hz: float | None = None  # faster: gpu_power readings between full ones
    # Slower: the GPU counter only on these full readings, and on the first and the last
    # (the last only when the sampler stopped cleanly); None: on every full reading.
    energy_rate_hz: float | None = None
    steps: int = 20
    step_s: float = 0.5
    idle_s: float = 0.1
    barrier_every: int = 5
    barrier_s: float = 0.2
    lead_s: float = 2.0  # sampling starts this long before run_start ...
    tail_s: float = 2.0  # ... and stops this long after run_end
    tokens_per_step: int = 4096
    gpu_idle_w: float = 80.0
    gpu_busy_w: float = 300.0
    host_idle_w: float = 40.0
    host_busy_w: float = 110.0
    restart_after: int | None = None  # attempt 1 completes this many steps, dies in the next
    resume_from: int | None = None  # ... and attempt 2 resumes from this checkpoint
    restart_pause_s: float = 1.0
    markers: bool = True
    metrics: bool = True
    trace_format: str = "arrow"  # or "jsonl": the format of runs recorded before Arrow
    straggler_rank: int | None = None  # arrives at every barrier as it lets go (waits 0 s)
    # The marker API's events (docs/markers.md): phases splitting every step evenly, in
    # this order (forward, backward, optimizer, ...), as phase_begin/phase_end records ...
    phases: tuple[str, ...] = ()
    late_rank: int | None = None  # ... this rank enters "backward" late_s late every step
    late_s: float = 0.1
    steps_from: str | None = None  # run_start's steps_from
    input_rank: int | None = None  # this rank begins every step but the first input_s late
    input_s: float = 0.2
    steps_from_of: dict[int, str] = field(default_factory=dict)  # ... other ranks' own
    marks: tuple[str, ...] = ()  # user events (mark) written after every step_end


@dataclass
class DeviceTruth:
    """What one device's samples say, on the head's timeline (head wall seconds)."""

    power_t_s: np.ndarray
    power_w: np.ndarray
    counter_t_s: np.ndarray
    counter_j: np.ndarray
    tick_power_w: np.ndarray  # the true power of every tick of the whole trace
    tick_t_s: np.ndarray  # every tick's start
    tick_s: float  # a tick's length

    def counter_delta_j(self, start_s: float, end_s: float) -> float:
        """Counter at ``end_s`` minus counter at ``start_s``, linear between readings."""
        return float(np.interp(end_s, self.counter_t_s, self.counter_j)) - float(
            np.interp(start_s, self.counter_t_s, self.counter_j)
        )

    def trapezoid_j(self, start_s: float, end_s: float) -> float:
        """Trapezoid of the power samples in [start_s, end_s] (both on the sample grid)."""
        inside = (self.power_t_s >= start_s - 1e-6) & (self.power_t_s <= end_s + 1e-6)
        return float(np.trapezoid(self.power_w[inside], self.power_t_s[inside]))

    def true_j(self, start_s: float, end_s: float) -> float:
        """The true energy over ticks starting in [start_s, end_s)."""
        inside = (self.tick_t_s >= start_s - 1e-6) & (self.tick_t_s < end_s - 1e-6)
        return float(self.tick_power_w[inside].sum() * self.tick_s)


@dataclass
class BuiltRun:
    """The run directory and the truth behind it (times: head wall seconds)."""

    run_dir: Path
    spec: RunSpec
    window_s: tuple[float, float]
    steps: dict[int, tuple[float, float]]  # final attempt: step -> (begin, end)
    barriers: dict[int, float]  # final attempt: step -> exit
    devices: dict[tuple[str, str], DeviceTruth]
    crash_s: float | None  # when attempt 1 died, if it did
    tokens: int

    def device_ids(self, node: str) -> list[str]:
        """The node's device ids, host first."""
        return [d for n, d in self.devices if n == node]


def gpu_uuid(node_index: int, gpu: int) -> str:
    """A UUID-shaped GPU id, distinct per node and GPU."""
    return f"GPU-{node_index:04x}{gpu:04x}-1111-2222-3333-{node_index * 16 + gpu:012x}"


def build_run(root: Path, spec: RunSpec, name: str = "run") -> BuiltRun:
    """Write the run directory ``root/name`` described by ``spec``."""
    run_dir = root / name
    tick_hz = max(spec.rate_hz, spec.power_rate_hz or spec.rate_hz)
    full_every = round(tick_hz / spec.rate_hz)
    schedule = _Schedule(spec, tick_hz)
    first_tick = -round(spec.lead_s * tick_hz)
    last_tick = schedule.end_tick + round(spec.tail_s * tick_hz)
    ticks = np.arange(first_tick, last_tick + 1)
    busy = np.zeros(ticks.size, dtype=bool)
    for begin, end in schedule.busy:
        busy[(ticks >= begin) & (ticks < end)] = True
    run_s = ticks / tick_hz
    truths: dict[tuple[str, str], DeviceTruth] = {}
    world = sum(_ranks(n) for n in spec.nodes)
    manifest_nodes = {}
    rank = 0
    for index, node in enumerate(spec.nodes):
        records, node_truth, devices = _node_samples(
            spec, node, index, ticks, run_s, busy, tick_hz, full_every
        )
        truths.update({(node.name, dev): truth for dev, truth in node_truth.items()})
        node_dir = run_dir / "telemetry" / "nodes" / node.name
        if spec.trace_format == "jsonl":
            _write_jsonl(node_dir / "samples.jsonl", records)
        else:
            _write_trace(node_dir / "trace-001.arrows", records)
        manifest_nodes[node.name] = _manifest_node(node, devices, records)
        if spec.markers:
            for local in range(_ranks(node)):
                marker = _markers(spec, schedule, node, index, rank, local, world, tick_hz)
                _write_jsonl(run_dir / "markers" / f"rank-{rank:05d}.jsonl", marker)
                rank += 1
    manifest = {
        "v": 1,
        "run_dir": str(run_dir),
        "head": spec.nodes[0].name,
        "rate_hz": spec.rate_hz,
        "power_rate_hz": spec.power_rate_hz or spec.rate_hz,
        "started_wall_s": T0_WALL_S + first_tick / tick_hz,
        "ended_wall_s": T0_WALL_S + last_tick / tick_hz,
        "nodes": manifest_nodes,
    }
    (run_dir / "telemetry" / "manifest.json").write_text(json.dumps(manifest, indent=2))
    if spec.metrics:
        _write_jsonl(run_dir / "metrics.jsonl", _metrics(spec, schedule, tick_hz))

    def head(tick: int) -> float:
        return T0_WALL_S + tick / tick_hz

    return BuiltRun(
        run_dir=run_dir,
        spec=spec,
        window_s=(head(0), head(schedule.end_tick)),
        steps={s: (head(b), head(e)) for s, (b, e) in schedule.final_steps.items()},
        barriers={s: head(t) for s, t in schedule.final_barriers.items()},
        devices=truths,
        crash_s=None if schedule.crash_tick is None else head(schedule.crash_tick),
        tokens=spec.steps * spec.tokens_per_step,
    )


class _Schedule:
    """Every marker event of the run, in ticks of the head's run time (identical per rank)."""

    def __init__(self, spec: RunSpec, tick_hz: float) -> None:
        step, idle = round(spec.step_s * tick_hz), round(spec.idle_s * tick_hz)
        barrier = round(spec.barrier_s * tick_hz)
        self.events: list[tuple[str, int, float, dict[str, Any]]] = []
        self.busy: list[tuple[int, int]] = []
        self.final_steps: dict[int, tuple[int, int]] = {}
        self.final_barriers: dict[int, int] = {}
        self.crash_tick: int | None = None
        k = 0
        self.events.append(("run_start", 0, k, {"strategy": "ddp", "resumed": False}))
        if spec.restart_after is not None:
            resume = spec.resume_from or 0
            attempts = [(1, spec.restart_after, True), (resume + 1, spec.steps, False)]
        else:
            attempts = [(1, spec.steps, False)]
        for number, (first, last, crashes) in enumerate(attempts):
            if number:
                self.events.append(("run_start", resume, k, {"strategy": "ddp", "resumed": True}))
            for s in range(first, last + 1):
                if s > 1 or number:
                    k += idle
                self.events.append(("step_begin", s, k, {}))
                self.busy.append((k, k + step))
                self.final_steps[s] = (k, k + step)
                for i, name in enumerate(spec.phases):
                    part = step / len(spec.phases)
                    self.events.append(("phase_begin", s, k + i * part, {"name": name}))
                    self.events.append(("phase_end", s, k + (i + 1) * part, {"name": name}))
                k += step
                self.events.append(("step_end", s, k, {"loss": 5.0 / s}))
                for name in spec.marks:
                    self.events.append((name, s, k, {"value": float(s)}))
                if spec.barrier_every and s % spec.barrier_every == 0:
                    k += barrier
                    self.events.append(("barrier", s, k, {"wait_s": spec.barrier_s}))
                    self.final_barriers[s] = k
                if crashes and s == spec.resume_from:
                    self.events.append(("checkpoint", s, k, {}))
            if crashes:
                k += idle
                self.events.append(("step_begin", last + 1, k, {}))
                self.busy.append((k, k + step // 2))
                k += step // 2
                self.crash_tick = k
                k += round(spec.restart_pause_s * tick_hz)
        self.events.append(("run_end", spec.steps, k, {}))
        self.end_tick = k


def _ranks(node: NodeSpec) -> int:
    return node.ranks if node.ranks is not None else max(node.gpus, 1)


def _in_any(run_s: np.ndarray, spans: list[tuple[float, float]]) -> np.ndarray:
    hit = np.zeros(run_s.size, dtype=bool)
    for lo, hi in spans:
        hit |= (run_s > lo + 1e-9) & (run_s < hi - 1e-9)
    return hit


def _node_samples(
    spec: RunSpec,
    node: NodeSpec,
    index: int,
    ticks: np.ndarray,
    run_s: np.ndarray,
    busy: np.ndarray,
    tick_hz: float,
    full_every: int,
) -> tuple[list[dict[str, Any]], dict[str, DeviceTruth], dict[str, dict[str, Any]]]:
    dt = 1.0 / tick_hz
    kept = ~_in_any(run_s, node.gaps)
    if node.lost_at_s is not None:
        kept &= run_s < node.lost_at_s - 1e-9
    full = (ticks - ticks[0]) % full_every == 0
    energy = full.copy()
    if spec.energy_rate_hz is not None:
        energy &= (ticks - ticks[0]) % round(tick_hz / spec.energy_rate_hz) == 0
        ends = np.flatnonzero(kept & full)
        if ends.size:
            energy[ends[0]] = True
            if node.lost_at_s is None:
                energy[ends[-1]] = True
    head_s = T0_WALL_S + run_s
    devices: dict[str, dict[str, Any]] = {}
    powers: dict[str, np.ndarray] = {}
    scale = np.ones(ticks.size)
    if node.counter_scale_between is not None:
        lo, hi = node.counter_scale_between
        scale[(run_s >= lo - 1e-9) & (run_s < hi - 1e-9)] = node.counter_scale
    else:
        scale[:] = node.counter_scale
    if node.host:
        devices["host"] = {"kind": "host", "cpus": 2, "power_source": node.host_power_source}
        powers["host"] = np.where(busy, spec.host_busy_w, spec.host_idle_w)
    for gpu in range(node.gpus):
        uuid = gpu_uuid(index, gpu)
        devices[uuid] = {"kind": "gpu", "name": "NVIDIA H100 80GB HBM3", "nvml_index": gpu}
        powers[uuid] = np.where(busy, spec.gpu_busy_w + 10 * gpu, spec.gpu_idle_w + 5 * gpu)
    counters = {}
    for dev, power in powers.items():
        base = 0.0 if dev == "host" else 1.0e6 + 1000 * index
        per_tick = power * dt * (1.0 if dev == "host" else scale)
        counters[dev] = base + np.concatenate([[0.0], np.cumsum(per_tick)[:-1]])
    throttle = np.zeros(ticks.size, dtype=np.int64)
    for lo, hi, bits in node.throttle:
        throttle[(run_s >= lo - 1e-9) & (run_s < hi - 1e-9)] |= bits
    mono_base = 1000.0 * (index + 1)
    # The host sensor writes energy_j from RAPL, or from its CPU model (not over IPMI).
    host_counter = node.host_rapl or node.host_power_source == "model"
    records: list[dict[str, Any]] = []
    for i in np.flatnonzero(kept):
        stamp = {
            "wall_s": float(head_s[i] + node.offset_s),
            "mono_s": float(mono_base + run_s[i]),
        }
        for dev in devices:
            on = bool(busy[i])
            if dev == "host":
                sample = {**stamp, "device": "host", "kind": "host"}
                sample["power_w"] = float(powers[dev][i])
                sample["power_source"] = node.host_power_source
                sample["cpu_util_pct"] = node.busy_cpu_util_pct if on else 5.0
                sample["memory_used_bytes"] = 8 << 30
                sample["memory_total_bytes"] = 64 << 30
                if host_counter and full[i]:
                    # RAPL's counter, or the CPU model's integral of its own power.
                    sample["energy_j"] = float(counters[dev][i])
                if node.host_rapl and full[i]:
                    sample["rapl_package_j"] = float(counters[dev][i] * 0.8)
                    sample["rapl_dram_j"] = float(counters[dev][i] * 0.2)
                if full[i]:
                    records.append(sample)
                continue
            power = {
                "power_w": float(powers[dev][i]),
                "power_source": "nvml_instant",
                "nvml_ts_us": int(round(head_s[i] * 1e6)),
            }
            if not full[i]:
                records.append({**stamp, "device": dev, "kind": "gpu_power", **power})
                continue
            counter = {"energy_j": float(counters[dev][i])} if energy[i] else {}
            records.append(
                {
                    **stamp,
                    "device": dev,
                    "kind": "gpu",
                    **power,
                    **counter,
                    "power_limit_w": node.power_limit_w,
                    "sm_clock_mhz": node.busy_sm_clock_mhz if on else 345,
                    "mem_clock_mhz": 2619,
                    "temperature_c": node.busy_temperature_c if on else 40,
                    "gpu_util_pct": 95 if on else 0,
                    "mem_util_pct": 40 if on else 0,
                    "memory_used_bytes": 20 << 30,
                    "memory_total_bytes": 80 << 30,
                    "clocks_event_reasons": int(throttle[i] | (0 if on else 0x1)),
                    "pcie_tx_kbs": 1000,
                    "pcie_rx_kbs": 2000,
                }
            )
    truths = {}
    for dev, power in powers.items():
        have_power = kept & (full | (dev != "host"))
        have_counter = kept & (energy if dev != "host" else full & host_counter)
        truths[dev] = DeviceTruth(
            power_t_s=head_s[have_power],
            power_w=power[have_power],
            counter_t_s=head_s[have_counter],
            counter_j=counters[dev][have_counter],
            tick_power_w=power,
            tick_t_s=head_s,
            tick_s=dt,
        )
    return records, truths, devices


def _manifest_node(
    node: NodeSpec, devices: dict[str, dict[str, Any]], records: list[dict[str, Any]]
) -> dict[str, Any]:
    offset = {"offset_s": node.offset_s, "uncertainty_s": 0.0001}
    return {
        "hostname": f"{node.name}.example",
        "sensors": ["host", *(["nvml"] if node.gpus else [])],
        "devices": devices,
        "clock": {**offset, "start": {**offset, "rounds": 15}, "end": {**offset, "rounds": 15}},
        "status": "lost" if node.lost_at_s is not None else "complete",
        "samples": len(records),
        "first_wall_s": records[0]["wall_s"] if records else None,
        "last_wall_s": records[-1]["wall_s"] if records else None,
        "error": "sampler process died (SIGKILL)" if node.lost_at_s is not None else None,
    }


def _markers(
    spec: RunSpec,
    schedule: _Schedule,
    node: NodeSpec,
    index: int,
    rank: int,
    local: int,
    world: int,
    tick_hz: float,
) -> list[dict[str, Any]]:
    who = {
        "node": node.name,
        "hostname": f"{node.name}.example",
        "rank": rank,
        "local_rank": local,
        "world_size": world,
        "gpu_uuid": gpu_uuid(index, local) if local < node.gpus else None,
        "pid": 4242 + rank,
    }
    records = []
    first_step = min((s for e, s, _, _ in schedule.events if e == "step_begin"), default=None)
    for event, step, tick, fields in schedule.events:
        extra = dict(fields)
        if event == "step_end":
            extra["tokens"] = spec.tokens_per_step // world
        if event == "barrier" and rank == spec.straggler_rank:
            extra["wait_s"] = 0.0
        if event == "run_start" and spec.steps_from_of.get(rank, spec.steps_from) is not None:
            extra["steps_from"] = spec.steps_from_of.get(rank, spec.steps_from)
        if (event, extra.get("name"), rank) == ("phase_begin", "backward", spec.late_rank):
            tick += spec.late_s * tick_hz
        if event == "step_begin" and rank == spec.input_rank and step not in (None, first_step):
            tick += spec.input_s * tick_hz
        records.append(
            {
                "v": 1,
                "event": event,
                "step": step,
                "wall_s": T0_WALL_S + tick / tick_hz + node.offset_s,
                "mono_s": 1000.0 * (index + 1) + tick / tick_hz,
                **who,
                **extra,
            }
        )
    return records


def _metrics(spec: RunSpec, schedule: _Schedule, tick_hz: float) -> list[dict[str, Any]]:
    lines = []
    for step, (begin, end) in sorted(schedule.final_steps.items()):
        step_s = (end - begin) / tick_hz
        lines.append(
            {
                "step": step,
                "loss": 5.0 / step,
                "step_time_s": step_s,
                "tokens": spec.tokens_per_step,
                "tokens_per_s": spec.tokens_per_step / step_s,
                "lr": 3e-3,
                "wall_s": T0_WALL_S + end / tick_hz,
            }
        )
    return lines


def _write_trace(path: Path, records: list[dict[str, Any]]) -> None:
    """As the sampler writes: a batch every 16 samples or so (a second's worth)."""
    writer = TraceWriter(path)
    for i, record in enumerate(records):
        writer.write(record)
        if i % 16 == 15:
            writer.flush()
    writer.close()


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")
