"""`rtk report` at cluster scale: wall time, peak RSS and trace bytes, new against old.

For each size (nodes x GPUs x seconds), a synthetic run directory is generated
(benchmarks/synthetic_run.py, with its faults) and each implementation's report runs
on it in a child process (``python -m toolkit report RUN_DIR``), with the child's own
wall time and peak RSS (``wait4``). An implementation is a directory holding a
``toolkit/`` package plus the run-directory format it reads:

- new: this checkout's ``toolkit/`` (or ``--new-root``) on the Arrow run (``--new-format``);
- old: ``toolkit/`` of ``--baseline-ref`` (``git archive`` into a temporary directory)
  on the JSON-lines version of the same run, up to ``--baseline-max-nodes`` (it holds
  every sample as a Python dict: about 1 GB per 4 nodes x 15 min).

Trace bytes per node-hour are measured for both formats at every size (where the old
report is skipped, from node 1's trace written as JSON lines alone).

    python benchmarks/report_scale.py [--sizes 4,16,64] [--gpus 8] [--seconds 3600]
        [--rate-hz 10] [--power-rate-hz 50] [--baseline-ref d694b6c] [--json PATH]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from synthetic_run import (
    FAULTS,
    Faults,
    SynthRun,
    SynthSpec,
    generate,
    plan_steps,
    write_node_trace,
)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BASELINE_REF = "d694b6c"  # the last commit whose report reads samples.jsonl
# What a checkout's rtk needs to run from source: the package and the files it ships.
SOURCE_PATHS = ("toolkit", "templates", "sbatch")


@dataclass(frozen=True)
class Implementation:
    """A report implementation: ``root/toolkit`` run on run directories in ``fmt``."""

    name: str
    root: Path
    fmt: str
    max_nodes: int | None = None  # larger runs are skipped


@dataclass
class Measurement:
    """One report child: how long, how much memory, and how it ended."""

    impl: str
    ok: bool
    wall_s: float
    peak_rss_bytes: int
    returncode: int | None
    error: str | None = None


def baseline_root(ref: str, into: Path) -> Path:
    """``toolkit/`` (and the data it reads) as of ``ref``, extracted under ``into``."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-tree", "--name-only", ref, *SOURCE_PATHS],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", ref, *listed],
        capture_output=True,
        check=True,
    ).stdout
    root = into / f"baseline-{ref}"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return root


def _child_env(root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root), "MPLBACKEND": "Agg"}


def check_import(impl: Implementation) -> None:
    """Fail unless a child with ``impl``'s environment imports its own ``toolkit``."""
    where = subprocess.run(
        [sys.executable, "-c", "import toolkit; print(toolkit.__file__)"],
        cwd=impl.root,
        env=_child_env(impl.root),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(where).resolve().is_relative_to(impl.root.resolve()):
        raise RuntimeError(f"{impl.name}: the child imports {where}, not {impl.root}/toolkit")


def measure_report(impl: Implementation, run_dir: Path, timeout_s: float) -> Measurement:
    """Run ``impl``'s ``rtk report`` on ``run_dir`` in a child: wall time and peak RSS."""
    log = run_dir.parent / f"{run_dir.name}.{impl.name}.log"
    with log.open("w") as out:
        began = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "toolkit", "report", str(run_dir)],
            cwd=impl.root,
            env=_child_env(impl.root),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        killer = threading.Timer(timeout_s, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        wall_s = time.perf_counter() - began
    proc.returncode = os.waitstatus_to_exitcode(status)
    error = None
    if proc.returncode != 0:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        error = lines[-1][:300] if lines else f"exit {proc.returncode}"
        if proc.returncode < 0 and wall_s >= timeout_s:
            error = f"killed after the {timeout_s:.0f} s timeout"
    return Measurement(
        impl=impl.name,
        ok=proc.returncode == 0,
        wall_s=wall_s,
        peak_rss_bytes=usage.ru_maxrss * 1024,  # KiB on Linux
        returncode=proc.returncode,
        error=error,
    )


def node_mb_per_hour(spec: SynthSpec, scratch: Path, fmt: str) -> float:
    """Node 1's trace alone, written in ``fmt``: MB per node-hour."""
    truth = write_node_trace(scratch, spec, plan_steps(spec), 0, fmt)
    assert truth.trace is not None
    mb = truth.trace.stat().st_size / 1e6 / (truth.sampled_s / 3600.0)
    shutil.rmtree(scratch)
    return mb


def _mb_per_node_hour(run: SynthRun) -> float:
    return run.trace_bytes / 1e6 / run.node_hours


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure_size(
    spec: SynthSpec, impls: Sequence[Implementation], work: Path, timeout_s: float, keep: bool
) -> dict[str, object]:
    """Generate the run(s) for ``spec`` and measure every implementation that fits."""
    label = f"{spec.nodes}x{spec.gpus}x{spec.seconds:g}s"
    row: dict[str, object] = {"size": label, "nodes": spec.nodes, "gpus": spec.gpus}
    runs: dict[str, SynthRun] = {}
    wanted = [i for i in impls if i.max_nodes is None or spec.nodes <= i.max_nodes]
    for fmt in dict.fromkeys(i.fmt for i in wanted) or ["arrow"]:
        runs[fmt] = generate(work / f"{label}-{fmt}", spec, fmt)
        print(f"  generated {label} {fmt}: {runs[fmt].seconds_taken:.1f} s", flush=True)
        row[f"generate_{fmt}_s"] = round(runs[fmt].seconds_taken, 2)
    first = next(iter(runs.values()))
    row["samples"] = first.samples
    row["steps"] = first.plan.steps
    row["markers_mb"] = round(_dir_bytes(first.run_dir / "markers") / 1e6, 1)
    for fmt in ("arrow", "jsonl"):
        if fmt in runs:
            mb = _mb_per_node_hour(runs[fmt])
        else:
            mb = node_mb_per_hour(spec, work / f"{label}-{fmt}-node001", fmt)
        row[f"{fmt}_mb_per_node_hour"] = round(mb, 2)
    for impl in impls:
        if impl not in wanted:
            row[impl.name] = None
            continue
        result = measure_report(impl, runs[impl.fmt].run_dir, timeout_s)
        row[impl.name] = asdict(result)
        state = "ok" if result.ok else f"FAILED ({result.error})"
        print(
            f"  {impl.name} report: {result.wall_s:.1f} s, "
            f"{result.peak_rss_bytes / 2**20:,.0f} MiB peak RSS, {state}",
            flush=True,
        )
    if not keep:
        for run in runs.values():
            shutil.rmtree(run.run_dir, ignore_errors=True)
    return row


def _cell(m: object, key: str, scale: float = 1.0, digits: int = 1) -> str:
    if not isinstance(m, dict):
        return "skipped"
    if not m["ok"]:
        return "failed"
    return f"{m[key] / scale:,.{digits}f}"


def _ratio(new: object, old: object, key: str) -> str:
    if isinstance(new, dict) and isinstance(old, dict) and new["ok"] and old["ok"]:
        return f"{new[key] / old[key]:.3f}"
    return "-"


def format_table(rows: Sequence[dict[str, object]]) -> str:
    """The results: one line per size, new/old ratios where both completed."""
    head = (
        f"{'size':<16}{'samples':>12}{'MB/node-h':>18}{'old report':>22}"
        f"{'new report':>22}{'new/old':>16}"
    )
    sub = (
        f"{'':<16}{'':>12}{'jsonl':>9}{'arrow':>9}{'wall s':>11}{'RSS MiB':>11}"
        f"{'wall s':>11}{'RSS MiB':>11}{'wall':>8}{'RSS':>8}"
    )
    lines = [head, sub]
    mib = float(2**20)
    for r in rows:
        old, new = r.get("old"), r.get("new")
        lines.append(
            f"{r['size']:<16}{r['samples']:>12,}"
            f"{r['jsonl_mb_per_node_hour']:>9.1f}{r['arrow_mb_per_node_hour']:>9.1f}"
            f"{_cell(old, 'wall_s'):>11}{_cell(old, 'peak_rss_bytes', mib, 0):>11}"
            f"{_cell(new, 'wall_s'):>11}{_cell(new, 'peak_rss_bytes', mib, 0):>11}"
            f"{_ratio(new, old, 'wall_s'):>8}{_ratio(new, old, 'peak_rss_bytes'):>8}"
        )
    for r in rows:
        for name in ("old", "new"):
            m = r.get(name)
            if isinstance(m, dict) and not m["ok"]:
                lines.append(f"{r['size']} {name}: {m['error']}")
    return "\n".join(lines)


def _git_rev(root: Path) -> str | None:
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="4,16,64", help="node counts, comma-separated")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--rate-hz", type=float, default=10.0)
    parser.add_argument("--power-rate-hz", type=float, default=None)
    parser.add_argument("--step-s", type=float, default=1.0)
    parser.add_argument("--barrier-every", type=int, default=10)
    parser.add_argument("--faults", default=",".join(FAULTS), help="'' for none")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--new-root", type=Path, default=REPO, help="directory holding toolkit/")
    parser.add_argument("--new-format", choices=("arrow", "jsonl"), default="arrow")
    parser.add_argument("--baseline-ref", default=DEFAULT_BASELINE_REF, help="'' for none")
    parser.add_argument("--baseline-max-nodes", type=int, default=8)
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="per report")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a temporary one")
    parser.add_argument("--keep", action="store_true", help="keep the generated runs")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="report-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    impls = []
    if args.baseline_ref:
        root = baseline_root(args.baseline_ref, work)
        impls.append(Implementation("old", root, "jsonl", args.baseline_max_nodes))
    impls.append(Implementation("new", args.new_root.resolve(), args.new_format))
    for impl in impls:
        check_import(impl)
    faults = [name for name in args.faults.split(",") if name]
    rows = []
    try:
        for nodes in (int(n) for n in args.sizes.split(",")):
            spec = SynthSpec(
                nodes=nodes,
                gpus=args.gpus,
                seconds=args.seconds,
                rate_hz=args.rate_hz,
                power_rate_hz=args.power_rate_hz,
                step_s=args.step_s,
                barrier_every=args.barrier_every,
                seed=args.seed,
                faults=Faults.named(faults, nodes, args.gpus),
            )
            print(f"{nodes} nodes x {args.gpus} GPUs x {args.seconds:g} s:", flush=True)
            rows.append(measure_size(spec, impls, work, args.timeout_s, args.keep))
    finally:
        if not args.keep and args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(format_table(rows))
    if args.json:
        result = {
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "new": {"root": str(args.new_root), "rev": _git_rev(args.new_root)},
            "old": {"ref": args.baseline_ref or None, "max_nodes": args.baseline_max_nodes},
            "rate_hz": args.rate_hz,
            "power_rate_hz": args.power_rate_hz,
            "faults": faults,
            "rows": rows,
        }
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
