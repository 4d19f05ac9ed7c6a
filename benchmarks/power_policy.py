"""What the power policy's driver side costs per window, and what power.jsonl grows by.

The controllers (``toolkit/power/optimize.py``, ``stragglers.py``) run on the job
driver once per window of steps, over every GPU of the run; ``power.jsonl`` gets a
window line and a decision line each time. Timed here on synthetic windows of 64,
1,024 and 8,192 GPUs (8 a node; one slower GPU, the others waiting): ``observe`` per
window, the window's stragglers waits from every rank's values (``window_waits``,
10 steps), and the bytes a window and its decision add to ``power.jsonl`` while the
limits move (per GPU) and once settled (totals). As a share of a core: one window
every ``--window-s`` seconds (a window is a few steps: 5 s at 0.5 s steps). Each
figure is the best of ``--repeats`` rounds; against the stall watchdog's budget of
0.5% of a core for the driver, which both share.

    python benchmarks/power_policy.py [--sizes 64,1024,8192] [--window-s 5] [--repeats 5]
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from toolkit.power.optimize import OptimizeController, OptimizeSettings
from toolkit.power.records import PowerRecorder
from toolkit.power.straggler_policy import StragglerController, StragglerSettings
from toolkit.power.waits import window_waits
from toolkit.power.windows import Controller, Decision, GpuKey, GpuRange, Window
from toolkit.stall.slow import RankSteps

GPUS_PER_NODE = 8
BUDGET_SHARE = 0.005


def gpus(count: int) -> dict[GpuKey, GpuRange]:
    """``count`` H100-like GPUs, 8 a node."""
    return {
        GpuKey(f"node{i // GPUS_PER_NODE:04d}", i % GPUS_PER_NODE): GpuRange(200.0, 700.0, 700.0)
        for i in range(count)
    }


def window(decision: Decision, steps: int) -> Window:
    """A window at the decision's limits: one slow GPU, the others waiting for it."""
    keys = sorted(decision.limits_w)
    slow = keys[len(keys) // 2]
    energy = {k: decision.limits_w[k] * 0.4 * steps for k in keys}
    waits = {k: (0.0 if k == slow else 0.1) for k in keys}
    return Window(dict(decision.limits_w), steps, 0.5, energy, waits)


def best_s(action: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return min(times)


def observe_s(make: Callable[[], Controller], repeats: int) -> float:
    """The mean time of one ``observe`` over a run's first 20 windows (best round)."""

    def play() -> None:
        controller = make()
        decision = controller.start()
        for _ in range(20):
            decision = controller.observe(window(decision, decision.steps))

    return best_s(play, repeats) / 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="64,1024,8192")
    parser.add_argument("--window-s", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'GPUs':>6} {'optimize':>10} {'stragglers':>11} {'waits':>9} "
          f"{'line/GPU':>9} {'line':>6} {'core share':>11}")  # fmt: skip
    for size in (int(s) for s in args.sizes.split(",")):
        ranges = gpus(size)
        opt = observe_s(
            functools.partial(OptimizeController, ranges, OptimizeSettings()), args.repeats
        )
        strag = observe_s(
            functools.partial(StragglerController, ranges, StragglerSettings()), args.repeats
        )
        ranks = [
            RankSteps(r, f"node{r // 8}", barrier_steps=tuple(range(100, 164)),
                      barrier_wait_s=tuple(0.01 * (r % 7) for _ in range(64)))
            for r in range(size)
        ]  # fmt: skip
        waits = best_s(functools.partial(window_waits, ranks, 150, 159), args.repeats)
        decision = StragglerController(ranges, StragglerSettings()).start()
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "power.jsonl"
            recorder = PowerRecorder(path)
            recorder.window(0.0, 1, window(decision, 10), per_gpu=True)
            recorder.decision(0.0, decision, per_gpu=True)
            moving = path.stat().st_size
            recorder.window(0.0, 11, window(decision, 10), per_gpu=False)
            recorder.decision(0.0, decision, per_gpu=False)
            settled = path.stat().st_size - moving
        share = (max(opt, strag) + waits) / args.window_s
        print(f"{size:>6} {opt * 1e3:>8.2f}ms {strag * 1e3:>9.2f}ms {waits * 1e3:>7.2f}ms "
              f"{moving / size:>8.0f}B {settled:>5}B {share:>10.4%}")  # fmt: skip
    print(f"budget: {BUDGET_SHARE:.1%} of a core for the driver's threads together")


if __name__ == "__main__":
    main()
