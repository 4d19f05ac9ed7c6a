"""What the stall watchdog's pure half costs: the diagnosis at scale, the detector per step.

The diagnosis (``toolkit/stall/diagnosis.py``) runs once per stall, on the driver, over
every rank's evidence: it is timed on synthetic evidence of 256, 4,096 and 16,384 ranks
(8 a node, stacks of ``--frames`` frames: library and standard-library frames around
the user's), most ranks waiting in ``all_reduce``, one in the data pipeline, one
stopped and one node that did not answer, with ``lines()`` (the screen) and the
``stall.json`` the record makes (its size, and the time ``append_stall`` takes).

The detector (``toolkit/stall/detector.py``) runs in the job driver for the whole run:
its cost per ``step_done`` (progress, and the same step fed again by another rank)
and per ``check``, then what a second of a run costs it as a share of one core: one
check a second, and ``steps_per_s`` steps each fed by every rank, against the driver's
budget of 0.5% of a core. Each figure is the best of ``--repeats`` rounds.

    python benchmarks/stall_diagnosis.py [--sizes 256,4096,16384] [--frames 30] [--repeats 5]
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from toolkit.rundir import RunDir
from toolkit.stall.detector import Stall, StallDetector
from toolkit.stall.diagnosis import diagnose
from toolkit.stall.location import is_user_file
from toolkit.stall.records import SLEEPING, STOPPED, Frame, NodeEvidence, RankEvidence, append_stall

RANKS_PER_NODE = 8
BUDGET_SHARE = 0.005  # the driver's watchdog: at most 0.5% of a core
SITE = "/opt/conda/envs/train/lib/python3.11/site-packages"
STDLIB = "/opt/conda/envs/train/lib/python3.11"
TRAIN = "/srv/jobs/gpt/train.py"


def stack(innermost: list[Frame], frames: int, line: int) -> tuple[Frame, ...]:
    """``innermost``, called at ``TRAIN:line``, then frames out to ``frames`` in all."""
    outer = [
        Frame("wrapper", f"{SITE}/torch/distributed/c10d_logger.py", 83),
        Frame("train_step", TRAIN, line),
        Frame("run_epoch", TRAIN, 140),
        Frame("fit", "/srv/jobs/gpt/trainer.py", 212),
    ]
    filler = [
        Frame(f"call_{i}", f"{SITE}/accelerate/hooks.py" if i % 2 else f"{STDLIB}/runpy.py", i)
        for i in range(max(frames - len(innermost) - len(outer) - 1, 0))
    ]
    return (*innermost, *outer, *filler, Frame("<module>", TRAIN, 300))[:frames]


def evidence(ranks: int, frames: int) -> tuple[list[NodeEvidence], dict[int, str]]:
    """Every node's answer: all wait in all_reduce but rank 5, rank 9, and the last node."""
    c10d = f"{SITE}/torch/distributed/distributed_c10d.py"
    all_reduce = stack([Frame("all_reduce", c10d, 2288)], frames, 70)
    data = stack(
        [
            Frame("wait", f"{STDLIB}/threading.py", 331),
            Frame("get", f"{STDLIB}/multiprocessing/queues.py", 113),
            Frame("_next_data", f"{SITE}/torch/utils/data/dataloader.py", 1318),
            Frame("__next__", f"{SITE}/torch/utils/data/dataloader.py", 631),
        ],
        frames,
        88,
    )
    nodes, expected = [], {}
    for n in range(ranks // RANKS_PER_NODE):
        name = f"node{n:05d}"
        first = n * RANKS_PER_NODE
        expected.update({r: name for r in range(first, first + RANKS_PER_NODE)})
        if n == ranks // RANKS_PER_NODE - 1:
            nodes.append(NodeEvidence(name, (), "no answer in 10 s", 10.0))
            continue
        answer = []
        for local in range(RANKS_PER_NODE):
            rank = first + local
            answer.append(
                RankEvidence(
                    rank=rank,
                    node=name,
                    pid=10_000 + rank,
                    local_rank=local,
                    gpu=str(local),
                    state=STOPPED if rank == 9 else SLEEPING,
                    frames=data if rank == 5 else all_reduce,
                    stack_source="py-spy",
                    last_event="step_end",
                    last_step=812,
                    last_wall_s=1.7e9,
                )
            )
        nodes.append(NodeEvidence(name, tuple(answer), None, 0.4))
    return nodes, expected


def best_s(function: Callable[[], object], repeats: int) -> float:
    """The best of ``repeats`` timings of ``function()``, in seconds."""
    rounds = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        rounds.append(time.perf_counter() - started)
    return min(rounds)


def bench_diagnosis(sizes: list[int], frames: int, repeats: int) -> None:
    print(f"diagnosis ({frames}-frame stacks; best of {repeats}):")
    print(f"{'ranks':>7s} {'diagnose ms':>12s} {'us/rank':>8s} {'lines':>6s}", end="")
    print(f" {'stall.json MB':>14s} {'write ms':>9s} {'unindented MB':>14s}")
    stall = Stall(812, 95.0, 60.0)
    for ranks in sizes:
        nodes, expected = evidence(ranks, frames)
        diagnosis = diagnose(nodes, stall, expected)
        took = best_s(functools.partial(diagnose, nodes, stall, expected), repeats)
        lines = diagnosis.lines()
        record = diagnosis.to_record(nodes, detected_wall_s=1.7e9, collect_s=10.0)
        with tempfile.TemporaryDirectory(prefix="rtk-stall-") as tmp:
            path = RunDir(Path(tmp)).stall
            started = time.perf_counter()
            append_stall(path, record)
            write_s = time.perf_counter() - started
            size_mb = path.stat().st_size / 1e6
        plain_mb = len(json.dumps([record.to_json()], separators=(",", ":"))) / 1e6
        print(
            f"{ranks:7d} {took * 1e3:12.1f} {took / ranks * 1e6:8.2f} {len(lines):6d} "
            f"{size_mb:14.1f} {write_s * 1e3:9.0f} {plain_mb:14.1f}"
        )
    print("the screen at the largest size:")
    print("\n".join(f"  | {line}" for line in lines))


def per_call_us(calls: int, repeats: int, run: Callable[[], object]) -> float:
    return best_s(run, repeats) / calls * 1e6


def bench_detector(calls: int, repeats: int, ranks: int, steps_per_s: float) -> None:
    def progress() -> None:
        detector = StallDetector(started_s=0.0)
        for step in range(calls):
            detector.step_done(step, step * 0.1)

    def repeated() -> None:
        detector = StallDetector(started_s=0.0)
        detector.step_done(5, 0.0)
        for i in range(calls):
            detector.step_done(5, i * 0.1)

    def checks() -> None:
        detector = StallDetector(started_s=0.0)
        for step in range(1, 200):
            detector.step_done(step, step * 0.1)
        for i in range(calls):
            detector.check(20.0 + i * 1e-6)

    def pairs() -> None:
        detector = StallDetector(started_s=0.0)
        for step in range(calls):
            detector.step_done(step, step * 0.1)
            detector.check(step * 0.1)

    progress_us = per_call_us(calls, repeats, progress)
    repeated_us = per_call_us(calls, repeats, repeated)
    check_us = per_call_us(calls, repeats, checks)
    pair_us = per_call_us(calls, repeats, pairs)
    bare_us = per_call_us(calls, repeats, lambda: [None for _ in range(calls)])
    print(f"detector (best of {repeats} rounds of {calls}):")
    print(f"  step_done, progress:        {progress_us:.2f} us")
    print(f"  step_done, same step again: {repeated_us:.2f} us")
    print(f"  check:                      {check_us:.2f} us")
    print(f"  step_done + check pair:     {pair_us:.2f} us  (loop overhead {bare_us:.3f} us)")
    per_second_us = check_us + steps_per_s * (progress_us + (ranks - 1) * repeated_us)
    met = "met" if per_second_us / 1e6 <= BUDGET_SHARE else "MISSED"
    print(
        f"  a second of a run at {steps_per_s:g} steps/s, each step fed by {ranks} ranks, "
        f"one check: {per_second_us:.0f} us = {per_second_us / 1e4:.3f}% of a core "
        f"(budget {BUDGET_SHARE * 100:g}%: {met})"
    )
    most = (BUDGET_SHARE * 1e6 - check_us) / repeated_us
    print(f"  step_done calls a second within the budget: about {most:,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256,4096,16384")
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--ranks", type=int, default=64, help="ranks feeding each step")
    parser.add_argument("--steps-per-s", type=float, default=10.0)
    args = parser.parse_args()
    assert not is_user_file(f"{SITE}/torch/distributed/distributed_c10d.py")
    bench_diagnosis([int(s) for s in args.sizes.split(",")], args.frames, args.repeats)
    bench_detector(args.calls, args.repeats, args.ranks, args.steps_per_s)


if __name__ == "__main__":
    main()
