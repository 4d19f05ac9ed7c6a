"""Time and size of the report's files (summary.json, PNGs, report.html) at cluster scale.

Builds a report in memory as ``build_report`` would leave it (figures plus bucketed
views, no traces read): N nodes x G GPUs and a host each, a window of T seconds cut
into at most 1,000 buckets, a step a second, a barrier every 10 steps; one node hotter,
a few GPUs throttled, one node lost half-way. Then writes the report and prints the
wall time of each file, the peak RSS and the page's size.

    python benchmarks/report_views.py --nodes 64 --gpus 8 --seconds 3600
    python benchmarks/report_views.py --against ../other-checkout   # ratios, same run

``--against DIR`` runs the same measurement on the rtk found in DIR (another checkout,
e.g. the previous implementation) in a child process and prints new / old ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np


def synthetic_report(nodes: int, gpus: int, seconds: float, root: Path) -> Any:
    """A Report with the figures and views of a run of that size (nothing on disk)."""
    from toolkit.rundir import Manifest, NodeManifest, RunSummary
    from toolkit.telemetry.report.build import Report
    from toolkit.telemetry.report.figures.crosscheck import CheckWindow, CrossCheck
    from toolkit.telemetry.report.figures.energy import DeviceReport, NodeReport
    from toolkit.telemetry.report.figures.steps import Phase, StepEnergy, StepStats
    from toolkit.telemetry.report.figures.views import Buckets, DeviceView
    from toolkit.telemetry.report.inputs.load import RunData
    from toolkit.telemetry.report.inputs.timeline import Barrier, Timeline, Window

    rng = np.random.default_rng(0)
    start = 1_795_250_000.0
    window = Window(start, start + seconds, "markers")
    buckets = Buckets.over(window.start_s, window.end_s, 10.0)
    t = buckets.middle_s - start
    busy = (np.floor(t) % 10 < 9).astype(np.float64)  # a barrier pause every 10 s
    names = [f"node{i + 1:03d}" for i in range(nodes)]
    node_reports = {}
    for n, name in enumerate(names):
        lost_at = seconds / 2 if n == nodes // 3 else None
        hot = 1.25 if n == nodes // 2 else 1.0
        devices = {}
        for g in range(gpus + 1):
            host = g == gpus
            base = 120.0 if host else (80.0 + (600.0 * hot - 80.0) * busy)
            power = base * (1 + 0.02 * rng.standard_normal(buckets.count))
            readings = {}
            throttled = None
            if host:
                readings["cpu_util_pct"] = 20 + 60 * busy
            else:
                readings["gpu_util_pct"] = 95 * busy
                readings["sm_clock_mhz"] = 345 + 1635 * busy
                readings["temperature_c"] = (
                    40 + 25 * busy * hot + rng.standard_normal(buckets.count)
                )
                throttled = np.where((n * gpus + g) % 97 == 5, busy, 0.0)
            if lost_at is not None:
                gone = t > lost_at
                power[gone] = np.nan
                for values in readings.values():
                    values[gone] = np.nan
                if throttled is not None:
                    throttled[gone] = np.nan
            covered = lost_at if lost_at is not None else seconds
            energy = float(np.nansum(power) * buckets.width_s)
            device = "host" if host else f"GPU-{n:04x}{g:04x}-1111-2222-3333-{n * 16 + g:012x}"
            devices[device] = DeviceReport(
                node=name,
                device=device,
                kind="host" if host else "gpu",
                samples=int(covered * 10),
                energy_j=energy,
                energy_source="modelled" if host else "counter",
                energy_covered_s=covered,
                avg_power_w=energy / covered,
                peak_power_w=float(np.nanmax(power)),
                power_source="model" if host else "nvml_instant",
                covered_fraction=covered / seconds,
                gaps=[],
                throttled_s=float(np.nansum(throttled) * buckets.width_s)
                if throttled is not None
                else 0.0,
                throttle_reasons_s={},
                counter_resets=0,
                view=DeviceView(buckets, power, readings, throttled),
            )
        energy = sum(d.energy_j for d in devices.values())
        node_reports[name] = NodeReport(
            name=name,
            hostname=name,
            status="lost" if lost_at is not None else "complete",
            offset_s=0.0,
            uncertainty_s=1e-4,
            error="sampler process died (SIGKILL)" if lost_at is not None else None,
            devices=devices,
            energy_j=energy,
            scope="sum of devices",
            avg_power_w=sum(d.avg_power_w or 0.0 for d in devices.values()),
            peak_power_w=sum(d.peak_power_w or 0.0 for d in devices.values()),
            samples=sum(d.samples for d in devices.values()),
            covered_fraction=1.0,
            gaps=[],
        )
    steps = int(seconds)
    barriers = [Barrier(s, start + s, 0.001, nodes * gpus) for s in range(10, steps + 1, 10)]
    total_w = sum(n.avg_power_w or 0.0 for n in node_reports.values())
    step_energy = [
        StepEnergy(s, start + s - 1, start + s, total_w, True) for s in range(1, steps + 1)
    ]
    edges = [start] + [b.t_s for b in barriers]
    phases = [
        Phase(f"phase {i}", a, b, 10, total_w * (b - a), {n: 1.0 for n in names}, True)
        for i, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True))
    ]
    checks = [
        CrossCheck(
            d.node,
            d.device,
            "barriers",
            [CheckWindow(a, b, 6000.0, 5900.0) for a, b in zip(edges[:-1], edges[1:], strict=True)],
            0,
        )
        for n in node_reports.values()
        for d in n.devices.values()
        if d.kind == "gpu"
    ]
    # Every node listed, as the report's loader lists a node it finds samples of.
    listed = {n: NodeManifest.unlisted(n) for n in names}
    manifest = Manifest(head=names[0], rate_hz=10.0, power_rate_hz=10.0, nodes=listed)
    timeline = Timeline(
        head=names[0],
        offsets_s={n: 0.0 for n in names},
        window=window,
        steps=[],
        step_rank=0,
        barriers=barriers,
        waits=None,
        ranks=nodes * gpus,
        restarts=0,
        marker_tokens=None,
    )
    energy_j = sum(n.energy_j for n in node_reports.values())
    return Report(
        run_dir=root,
        data=RunData(root, manifest, {}, {}, [], [], []),
        timeline=timeline,
        nodes=node_reports,
        run=RunSummary(
            seconds,
            energy_j,
            steps,
            None,
            energy_j / steps,
            None,
            None,
            None,
            True,
            0,
            nodes * gpus,
        ),
        steps=step_energy,
        step_stats=StepStats(steps, 0, False, total_w, total_w, total_w, total_w, total_w, total_w),
        phases=phases,
        cross_checks=checks,
        stragglers=None,
        notes=[f"node {names[nodes // 3]}: sampler lost"],
    )


def measure(nodes: int, gpus: int, seconds: float) -> dict[str, float]:
    """Build the report, write its files, time each part; then the write's peak memory."""
    from toolkit.telemetry.report import format_summary, summary_dict, write_report
    from toolkit.telemetry.report.page.html import render_html
    from toolkit.telemetry.report.plots.draw import write_plots

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        report = synthetic_report(nodes, gpus, seconds, root)
        built_s = time.perf_counter() - started
        started = time.perf_counter()
        files = write_report(report, root / "report")
        total_s = time.perf_counter() - started
        started = time.perf_counter()
        summary_dict(report)
        summary_s = time.perf_counter() - started
        started = time.perf_counter()
        plots = write_plots(report, root / "again" / "plots")
        plots_s = time.perf_counter() - started
        started = time.perf_counter()
        render_html(report, plots, root / "again")
        html_s = time.perf_counter() - started
        text = format_summary(report)
        # Python and numpy allocations while writing (numpy reports its buffers to
        # tracemalloc); measured apart, as tracing slows everything down.
        tracemalloc.start()
        write_report(report, root / "traced")
        peak_bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return {
            "build_s": built_s,
            "write_report_s": total_s,
            "summary_dict_s": summary_s,
            "plots_s": plots_s,
            "html_s": html_s,
            "html_bytes": files.html.stat().st_size,
            "summary_json_bytes": files.summary_json.stat().st_size,
            "png_bytes": sum(p.stat().st_size for p in files.plots.values()),
            "terminal_lines": len(text.splitlines()),
            "write_peak_mb": peak_bytes / 2**20,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure(args.nodes, args.gpus, args.seconds)))
        return
    other = None
    if args.against is not None:  # first, in a fresh process, while this one is small
        env = {**os.environ, "PYTHONPATH": str(args.against.resolve())}
        argv = [sys.executable, __file__, "--json", "--nodes", str(args.nodes)]
        argv += ["--gpus", str(args.gpus), "--seconds", str(args.seconds)]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        other = json.loads(out.stdout.strip().splitlines()[-1])
    figures = measure(args.nodes, args.gpus, args.seconds)
    print(f"{args.nodes} nodes x {args.gpus} GPUs, {args.seconds:g} s window")
    for key, value in figures.items():
        line = f"  {key:<22} {value:>14,.2f}"
        if other is not None and key in other:
            ratio = value / other[key] if other[key] else float("nan")
            line += f"   against {other[key]:>14,.2f}: {ratio:.2f}x"
        print(line)


if __name__ == "__main__":
    main()
