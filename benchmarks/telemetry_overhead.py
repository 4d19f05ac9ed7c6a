"""The sampler's own cost: CPU share of one core at 10 Hz and 50 Hz, and step time with
and without telemetry, measured in one run on this machine; and the same CPU share of
the previous sampler (``--baseline-ref``, JSON lines), run alternately with this one.

First, the GPU energy counter's rate (``--energy-only`` runs just this): the sampler
at 10 Hz full readings and 50 Hz power, with the counter read at every full reading
(old) and at 1 Hz (new), alternated, on the NVML sensor alone: CPU per GPU per second,
late ticks, and what one full reading takes with and without the counter. On a GPU
machine this is the real NVML (``--nvml real``); elsewhere NVML's fake
(``tests/fake_nvml.py``) with 8 GPUs whose counter call costs 4 ms of CPU, as measured
on an H200 (``--fake-gpus``, ``--fake-energy-call-ms``, ``--fake-energy-sleep``).

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
from typing import Any

import psutil
from common import JSON_LINES_REF, REPO, baseline_root

from toolkit.telemetry.sampler import Sampler
from toolkit.telemetry.sensors.base import SensorError
from toolkit.telemetry.sensors.nvml import NvmlSensor
from toolkit.train.config import TrainConfig
from toolkit.train.local_processes import run_local

WARMUP_S = 3.0
# What the energy comparison runs: full readings, power, and the new counter rate.
ENERGY_RATE_HZ, ENERGY_POWER_RATE_HZ, ENERGY_NEW_HZ = 10.0, 50.0, 1.0
TARGET_PER_GPU = 0.01  # of a core, at 10 Hz with 50 Hz power, on the GPU machine


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


def nvml_sensor(setup: dict[str, Any]) -> NvmlSensor:
    """The real NVML, or the fake with ``gpus`` GPUs whose counter call costs ``cost_s``."""
    if setup["nvml"] == "real":
        return NvmlSensor()
    sys.path.insert(0, str(REPO / "tests"))
    from fake_nvml import FakeGpu, FakeNvml

    fake = FakeNvml([FakeGpu(uuid=f"GPU-{i:08x}") for i in range(setup["gpus"])])
    fake.fake_energy_call_s = setup["cost_s"]
    fake.fake_energy_call_busy = setup["busy"]
    return NvmlSensor(fake)


def energy_child(setup: dict[str, Any]) -> dict[str, Any]:
    """One sampler run in this process (the caller's child): its CPU share and stats."""
    sensor = nvml_sensor(setup)
    gpus = len(sensor.devices())
    read_ms = {}
    for energy in (True, False):
        began = time.perf_counter()
        for _ in range(10):
            sensor.read(energy=energy)
        read_ms[energy] = (time.perf_counter() - began) / 10 * 1000
    sampler = Sampler(
        [sensor],
        Path(setup["out"]),
        ENERGY_RATE_HZ,
        ENERGY_POWER_RATE_HZ,
        energy_rate_hz=setup["energy_rate_hz"] or None,
    )
    sampler.start()
    time.sleep(WARMUP_S)
    cpu_before, wall_before = time.process_time(), time.monotonic()
    ticks_before, late_before = sampler.stats.ticks, sampler.stats.late_ticks
    time.sleep(setup["duration_s"])
    cpu_s, wall_s = time.process_time() - cpu_before, time.monotonic() - wall_before
    ticks, late = sampler.stats.ticks - ticks_before, sampler.stats.late_ticks - late_before
    stats = sampler.stop()
    sensor.close()
    return {
        "gpus": gpus,
        "cpu_share": cpu_s / wall_s,
        "ticks_per_s": ticks / wall_s,
        "late_ticks": late,
        "energy_reads": stats.energy_reads,
        "read_ms": read_ms[True],
        "read_no_energy_ms": read_ms[False],
    }


def energy_rate_comparison(args: argparse.Namespace, work: Path) -> None:
    """Old (counter with every full reading) against new (1 Hz), alternated, each a child."""
    nvml = args.nvml
    if nvml == "auto":
        try:
            NvmlSensor().close()
            nvml = "real"
        except SensorError:
            nvml = "fake"
    setup = {
        "nvml": nvml,
        "gpus": args.fake_gpus,
        "cost_s": args.fake_energy_call_ms / 1000,
        "busy": not args.fake_energy_sleep,
        "duration_s": args.energy_duration_s,
    }
    results: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    for i in range(args.energy_repeats):
        for name, rate_hz in (("old", 0.0), ("new", ENERGY_NEW_HZ)):
            out = work / f"energy-{name}-{i}.arrows"
            child = {**setup, "energy_rate_hz": rate_hz, "out": str(out)}
            done = subprocess.run(
                [sys.executable, __file__, "--energy-child", json.dumps(child)],
                capture_output=True,
                text=True,
                check=True,
            )
            results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    gpus = results["new"][0]["gpus"]
    what = (
        "real NVML"
        if nvml == "real"
        else f"NVML fake, energy call {args.fake_energy_call_ms:g} ms "
        + ("asleep" if args.fake_energy_sleep else "on the CPU")
    )
    print(
        f"GPU energy counter rate ({what}; {gpus} GPUs, NVML sensor only, "
        f"{ENERGY_RATE_HZ:g} Hz full readings, {ENERGY_POWER_RATE_HZ:g} Hz power, "
        f"{args.energy_duration_s:g} s x {args.energy_repeats}, alternated):"
    )
    with_ms = statistics.median(r["read_ms"] for r in results["new"])
    without_ms = statistics.median(r["read_no_energy_ms"] for r in results["new"])
    print(
        f"  one full reading of all GPUs: {with_ms:.2f} ms with the counter, "
        f"{without_ms:.2f} ms without"
    )
    per_gpu = {}
    for name, label in (("old", "counter with every full reading"), ("new", "counter at 1 Hz")):
        runs = results[name]
        share = statistics.median(r["cpu_share"] for r in runs)
        per_gpu[name] = share / gpus
        late = statistics.median(r["late_ticks"] for r in runs)
        ticks = statistics.median(r["ticks_per_s"] for r in runs)
        each = ", ".join(f"{r['cpu_share'] * 100:.2f}" for r in runs)
        print(
            f"  {name} ({label}): {per_gpu[name] * 100:.3f}% of a core per GPU "
            f"({share * 100:.2f}% in all; runs: {each}), "
            f"{ticks:.1f} ticks/s of {ENERGY_POWER_RATE_HZ:g}, {late:g} late"
        )
    ratio = per_gpu["new"] / per_gpu["old"] if per_gpu["old"] > 0 else float("nan")
    verdict = "met" if per_gpu["new"] <= TARGET_PER_GPU else "NOT met"
    print(
        f"  new/old: {ratio:.3f}; target at most {TARGET_PER_GPU:.0%} of a core per GPU: "
        f"{verdict}" + ("" if nvml == "real" else " (here, on the fake; the target is the GPU's)")
    )


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
    parser.add_argument(
        "--energy-only", action="store_true", help="only the energy counter rate comparison"
    )
    parser.add_argument("--nvml", choices=("auto", "real", "fake"), default="auto")
    parser.add_argument("--fake-gpus", type=int, default=8)
    parser.add_argument("--fake-energy-call-ms", type=float, default=4.0)
    parser.add_argument(
        "--fake-energy-sleep",
        action="store_true",
        help="the fake's counter call waits instead of using the CPU",
    )
    parser.add_argument("--energy-duration-s", type=float, default=10.0)
    parser.add_argument("--energy-repeats", type=int, default=2)
    parser.add_argument("--energy-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.energy_child:
        print(json.dumps(energy_child(json.loads(args.energy_child))), flush=True)
        return
    work = Path(tempfile.mkdtemp(prefix="rtk-bench-telemetry-"))
    try:
        energy_rate_comparison(args, work)
        if args.energy_only:
            return
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
