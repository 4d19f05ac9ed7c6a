"""What a ``toolkit.markers`` call costs a training loop, off and writing.

Each public call is timed in this process, first with markers off (no ``RTK_RUN_DIR``:
every call returns at once) and then on, writing real records to a run directory in
a temporary folder, as a rank under rtk does (one line-buffered ``write`` a record).
A bare Python function call is timed in the same run as the yardstick: every figure
is printed in microseconds and as a ratio to it. A ``with step():`` or ``with
phase():`` block is two calls (and two records): its cost is printed per block and
per call. Each figure is the best of ``--repeats`` rounds of ``--calls`` calls (what
the code costs; slower rounds are other processes taking the core), with the median
beside it.

Targets (issue 32): at most 2 us a call off, at most 20 us a call writing.

    python benchmarks/markers_overhead.py [--calls 20000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from toolkit import markers
from toolkit.markers import recorder
from toolkit.rundir import read_markers

OFF_TARGET_US, ON_TARGET_US = 2.0, 20.0


def bare() -> None:
    """The yardstick: a call that does nothing."""


def step_block() -> None:
    with markers.step(tokens=4096):
        pass


def phase_block() -> None:
    with markers.phase("forward"):
        pass


def begin_end_step() -> None:
    markers.begin_step()
    markers.end_step(tokens=4096, loss=2.5)


def mark() -> None:
    markers.mark("lr", lr=1e-4)


def barrier() -> None:
    markers.barrier()  # no process group: the call's own cost, nothing to wait for


# name, the function, how many API calls one run of it makes
CASES: list[tuple[str, Callable[[], None], int]] = [
    ("with step(tokens=...)", step_block, 2),
    ("with phase(name)", phase_block, 2),
    ("begin_step + end_step", begin_end_step, 2),
    ("mark(event, field=...)", mark, 1),
    ("barrier() (no group)", barrier, 1),
]


def per_run_us(function: Callable[[], None], calls: int, repeats: int) -> tuple[float, float]:
    """(best, median) over ``repeats`` rounds of the mean time of one run, in us."""
    rounds = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            function()
        rounds.append((time.perf_counter() - started) / calls * 1e6)
    return min(rounds), statistics.median(rounds)


def measure(calls: int, repeats: int) -> dict[str, tuple[float, float]]:
    """Each case's (best, median) cost per API call, in us, with markers as they are now."""
    measured = {}
    for name, function, api_calls in CASES:
        best, median = per_run_us(function, calls, repeats)
        measured[name] = (best / api_calls, median / api_calls)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    bare_us, bare_median_us = per_run_us(bare, args.calls, args.repeats)
    recorder.reset({})
    off = measure(args.calls, args.repeats)
    with tempfile.TemporaryDirectory(prefix="rtk-markers-") as tmp:
        run_dir = Path(tmp) / "run"
        recorder.reset({"RTK_RUN_DIR": str(run_dir)})
        markers.mark("warm_up")  # the first write opens the file: not a steady-state cost
        on = measure(args.calls, args.repeats)
        recorder.reset({})
        records = len(read_markers(run_dir))

    print(
        f"bare Python function call: {bare_us:.3f} us (median {bare_median_us:.3f}); "
        f"best and median of {args.repeats} rounds of {args.calls}"
    )
    print(f"{'per API call':24s} {'off us':>7s} {'median':>7s} {'x bare':>7s}", end="")
    print(f" {'on us':>7s} {'median':>7s} {'x bare':>7s}")
    for name, _, _ in CASES:
        (off_us, off_median), (on_us, on_median) = off[name], on[name]
        print(f"{name:24s} {off_us:7.3f} {off_median:7.3f} {off_us / bare_us:7.1f}", end="")
        print(f" {on_us:7.2f} {on_median:7.2f} {on_us / bare_us:7.0f}")
    worst_off, worst_on = max(b for b, _ in off.values()), max(b for b, _ in on.values())
    print(f"records written while on: {records} (every one read back)")
    print(
        f"worst off {worst_off:.3f} us (target <= {OFF_TARGET_US:g}: "
        f"{'met' if worst_off <= OFF_TARGET_US else 'MISSED'}), "
        f"worst on {worst_on:.2f} us (target <= {ON_TARGET_US:g}: "
        f"{'met' if worst_on <= ON_TARGET_US else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
