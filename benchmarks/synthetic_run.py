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
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from synthetic.records import BARRIER_ENTER, node_manifest, write_markers, write_metrics
from synthetic.samples import FORMATS, NodeTruth, write_node_trace
from synthetic.spec import FAULTS, T0_WALL_S, Faults, Plan, SynthSpec, plan_steps

from toolkit.rundir import Manifest, RunDir

__all__ = [
    "BARRIER_ENTER",
    "FAULTS",
    "FORMATS",
    "Faults",
    "NodeTruth",
    "Plan",
    "SynthRun",
    "SynthSpec",
    "generate",
    "plan_steps",
    "write_node_trace",
]


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
        nodes={n.name: node_manifest(spec, i, n) for i, n in enumerate(nodes)},
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
