"""The sampler's own cost: CPU share of one core at 10 Hz and 50 Hz, and step time with
and without telemetry, measured in one run on this machine; and the same CPU share of
the previous sampler (``--baseline-ref``, JSON lines), run alternately with this one.

The sampler runs as its own process (as the per-node actor does), so its CPU time is
read from the process. The step-time comparison trains the tiny GPT on 2 local gloo
ranks, alternating runs without and with a 10 Hz sampler beside them. Where
``nvidia-smi`` exists, its 100 ms power-query loop (what people run today) is measured
too, as the peer.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from common import JSON_LINES_REF, baseline_root

from toolkit.train.config import TrainConfig
from toolkit.train.local import run_local

WARMUP_S = 3.0


def cpu_share(argv: list[str], duration_s: float, env: dict[str, str] | None = None) -> float:
    """Run ``argv`` for ``duration_s``; its CPU seconds per wall second (1.0 = a core)."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    try:
        if argv[1:3] == ["-m", "toolkit.telemetry.sampler"]:
            assert proc.stdout is not None
            proc.stdout.readline()  # started: sensors are open
            # The first batches pay one-time set-up (pyarrow's first arrays and stream
            # header): a second or two of a run of hours, so the steady state is measured.
            time.sleep(WARMUP_S)
        ps = psutil.Process(proc.pid)
        before = ps.cpu_times()
        began = time.monotonic()
        time.sleep(duration_s)
        after = ps.cpu_times()
        wall_s = time.monotonic() - began
    finally:
        proc.terminate()
        proc.wait(10)
    used = (after.user - before.user) + (after.system - before.system)
    return used / wall_s


def sampler_argv(out: Path, rate_hz: float, sensors: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "toolkit.telemetry.sampler",
        str(out),
        "--sensors",
        sensors,
        "--rate-hz",
        str(rate_hz),
    ]


def median_step_s(run_dir: Path, skip: int) -> float:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(x)["step_time_s"] for x in lines][skip:]
    return statistics.median(steps)


def train_once(work: Path, name: str, steps: int, sampler: list[str] | None) -> float:
    run_dir = work / name
    config = TrainConfig(
        run_dir=str(run_dir),
        model_size="tiny",
        batch_size=8,
        max_steps=steps,
        barrier_every=5,
        log_every=steps,
    )
    proc = subprocess.Popen(sampler, stdout=subprocess.DEVNULL) if sampler else None
    try:
        run_local(config, 2, work / f"{name}.rendezvous")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    return median_step_s(run_dir, skip=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sensors", default="auto")
    parser.add_argument(
        "--baseline-ref",
        default=JSON_LINES_REF,
        help="git ref of the sampler to compare with ('' for none)",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rtk-bench-telemetry-"))
    try:
        print(f"sampler CPU use ({args.sensors} sensors, {args.duration_s:g} s each):")
        old_env = None
        if args.baseline_ref:
            root = baseline_root(args.baseline_ref, work)
            old_env = {**os.environ, "PYTHONPATH": str(root)}
        shares = {}
        for rate_hz in (10.0, 50.0):
            argv = sampler_argv(work / f"cpu-{rate_hz:g}.arrows", rate_hz, args.sensors)
            if old_env is not None:
                old_argv = sampler_argv(work / f"old-{rate_hz:g}.jsonl", rate_hz, args.sensors)
                old = cpu_share(old_argv, args.duration_s, old_env)
            shares[rate_hz] = cpu_share(argv, args.duration_s)
            line = f"  {rate_hz:4g} Hz: {shares[rate_hz] * 100:.2f}% of one core"
            if old_env is not None:
                line += (
                    f"; {args.baseline_ref} (JSON lines): {old * 100:.2f}%, "
                    f"new/old {shares[rate_hz] / old:.2f}"
                )
            print(line)
        if shutil.which("nvidia-smi"):
            peer = ["nvidia-smi", "--query-gpu=power.draw", "--format=csv", "-lms", "100"]
            share = cpu_share(peer, args.duration_s)
            print(
                f"  nvidia-smi -lms 100 (peer): {share * 100:.2f}% of one core; "
                f"rtk at 10 Hz uses {shares[10.0] / share:.2f}x of it"
            )
        else:
            print("  (no nvidia-smi here: no peer to compare with)")
        without, with_ = [], []
        for i in range(args.repeats):
            without.append(train_once(work, f"off-{i}", args.steps, None))
            sampler = sampler_argv(work / f"train-{i}.arrows", 10.0, args.sensors)
            with_.append(train_once(work, f"on-{i}", args.steps, sampler))
        off, on = statistics.median(without), statistics.median(with_)
        print(f"tiny GPT, 2 gloo ranks, median step time over {args.repeats} runs each:")
        print(f"  without telemetry: {off * 1000:.2f} ms  (runs: {fmt(without)})")
        print(f"  with 10 Hz sampler: {on * 1000:.2f} ms  (runs: {fmt(with_)})")
        print(f"  ratio with/without: {on / off:.3f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def fmt(values: list[float]) -> str:
    return ", ".join(f"{v * 1000:.2f}" for v in values)


if __name__ == "__main__":
    main()
