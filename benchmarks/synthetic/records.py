"""The run's records besides the traces: the manifest, every rank's markers, rank 0's metrics.

Written with the run directory's own types (``Manifest``, ``MetricsLine``), markers
formatted directly in ``Marker.to_json``'s shape (millions of lines at scale).
"""

from __future__ import annotations

import numpy as np

from synthetic.samples import (
    GPU_MEMORY_BYTES,
    HOST_CPUS,
    HOST_MEMORY_BYTES,
    POWER_LIMIT_W,
    NodeTruth,
)
from synthetic.spec import T0_WALL_S, Plan, SynthSpec
from toolkit.rundir import MetricsLine, NodeManifest, RunDir
from toolkit.rundir.devices import DeviceInfo, GpuInfo, HostInfo
from toolkit.rundir.telemetry import ClockEntry, ClockOffset, SamplerSummary

BARRIER_ENTER = "barrier_enter"


def node_manifest(spec: SynthSpec, node: int, truth: NodeTruth) -> NodeManifest:
    lost = node == spec.faults.lost_node
    estimate = ClockOffset(truth.offset_s, 0.00012, 15, 0.00024)
    devices: dict[str, DeviceInfo] = {
        "host": HostInfo(
            power_source="model",
            energy_source="model",
            cpus=HOST_CPUS,
            memory_total_bytes=HOST_MEMORY_BYTES,
        )
    }
    for g in range(spec.gpus):
        uuid = spec.gpu_uuid(node, g)
        devices[uuid] = GpuInfo(
            uuid=uuid,
            nvml_index=g,
            name="NVIDIA H100 80GB HBM3",
            serial=f"1652{node:05d}{g:04d}",
            memory_total_bytes=GPU_MEMORY_BYTES,
            power_limit_w=POWER_LIMIT_W,
            pci_bus_id=f"00000000:{0x18 + 0x10 * g:02X}:00.0",
            unsupported=(),
        )
    return NodeManifest(
        name=truth.name,
        hostname=f"{truth.name}.cluster.internal",
        offset_s=truth.offset_s,
        uncertainty_s=0.00012,
        status="lost" if lost else "complete",
        devices=devices,
        samples_expected=truth.samples,
        error="sampler process died (SIGKILL)" if lost else None,
        node_id=f"{spec.seed:08x}{node:048x}",
        pid=41000 + node,
        sensors=("host", "nvml"),
        clock=ClockEntry(truth.offset_s, 0.00012, estimate, estimate),
        first_wall_s=truth.first_wall_s,
        last_wall_s=truth.last_wall_s,
        sampler=None
        if lost
        else SamplerSummary(truth.samples, truth.first_wall_s, truth.last_wall_s),
    )


def write_markers(run: RunDir, spec: SynthSpec, plan: Plan) -> None:
    """Every rank's marker file, as ``MarkerWriter`` writes it (formatted directly: fast)."""
    loss = (2.1 + 8.0 / (1.0 + np.arange(1, plan.steps + 1) / 40.0)).round(6).tolist()
    tokens = spec.tokens_per_rank
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
        head[2] = np.maximum(head[2], head[1] + 1e-5)  # enters the barrier after step_end
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
