"""What ``rtk torchrun`` adds before the first step, against torchrun started by hand.

On a 3-node sandbox (root; ``rtk sandbox`` needs it) with Ray up, the same plain DDP
script (tests/data/user_scripts/train_ddp.py, gloo on CPU) is started two ways, in
alternating order, ``--repeats`` times each:

- by hand: ``python -m torch.distributed.run`` with the same c10d rendezvous, started
  inside every node at once (nsenter, as a login shell per node would), timed from the
  start to rank 0's first step line ("epoch 0 step 0");
- rtk: ``rtk torchrun INVENTORY -- train_ddp.py``, timed from the command's start to
  the same line in its streamed log (the Ray job's submission, the telemetry job's
  samplers, the driver's node actors and their facts come before it).

Printed: each way's median, and rtk's as a ratio of the hand-started one.

    python benchmarks/torchrun_startup.py [--repeats 3] [--keep]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from toolkit.sandbox import Sandbox, create, destroy
from toolkit.sandbox.procs import nsenter_argv

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "data" / "user_scripts"
FIRST_STEP = "epoch 0 step 0 "
NAME, SUBNET = "sbtrb", "10.77.27"
STEPS = ("--steps", "6")


def until_first_step(procs: list[subprocess.Popen[str]], started_s: float) -> float:
    """Seconds from ``started_s`` to the first step line of any of ``procs`` (rank 0's
    node is the rendezvous' choice); then every one of them is awaited."""
    seen: list[float] = []
    tails: list[list[str]] = [[] for _ in procs]

    def read(index: int) -> None:
        stream = procs[index].stdout
        assert stream is not None
        for line in stream:
            tails[index] = [*tails[index][-20:], line]
            if FIRST_STEP in line and not seen:
                seen.append(time.monotonic() - started_s)

    readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(len(procs))]
    for reader in readers:
        reader.start()
    for proc, reader in zip(procs, readers, strict=True):
        proc.wait(timeout=300)
        reader.join(timeout=10)
    if not seen or any(p.returncode for p in procs):
        raise RuntimeError("".join(line for tail in tails for line in tail))
    return seen[0]


def by_hand(sandbox: Sandbox, port: int) -> float:
    """torchrun inside every node at once; seconds to rank 0's first step."""
    head = sandbox.nodes[0]
    argv = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=3", "--nproc-per-node=1",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={head.address}:{port}",
        f"--rdzv-id=hand-{port}", str(SCRIPTS / "train_ddp.py"), *STEPS,
    ]  # fmt: skip
    # As rtk env --export gives a user: gloo on the nodes' cluster interface.
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "eth0"}
    started_s = time.monotonic()
    procs = [
        subprocess.Popen(
            nsenter_argv(node.init_pid, argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for node in sandbox.nodes
    ]
    return until_first_step(procs, started_s)


def with_rtk(inventory: Path, env: dict[str, str], out: Path, run: int) -> float:
    """``rtk torchrun``; seconds to the first step line in its log."""
    argv = [
        sys.executable, "-m", "toolkit", "torchrun", str(inventory),
        "--output-dir", str(out), "--run-id", f"bench-{run}", "--", "train_ddp.py", *STEPS,
    ]  # fmt: skip
    started_s = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=SCRIPTS, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    return until_first_step([proc], started_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox running")
    args = parser.parse_args()
    destroy(NAME)
    sandbox = create(3, name=NAME, subnet=SUBNET)
    state = Path(tempfile.mkdtemp(prefix="rtk-bench-state-"))
    env = {**os.environ, "RTK_STATE_DIR": str(state)}
    inventory = sandbox.inventory_path
    try:
        up = [sys.executable, "-m", "toolkit", "up", str(inventory)]
        subprocess.run(up, env=env, check=True, capture_output=True)
        hand_s: list[float] = []
        rtk_s: list[float] = []
        with tempfile.TemporaryDirectory() as out:
            for run in range(args.repeats):
                order = [0, 1] if run % 2 == 0 else [1, 0]
                for which in order:
                    if which == 0:
                        hand_s.append(by_hand(sandbox, 29600 + run))
                    else:
                        rtk_s.append(with_rtk(inventory, env, Path(out), run))
        hand, rtk = statistics.median(hand_s), statistics.median(rtk_s)
        print(f"to the first step, median of {args.repeats} (3 nodes, 1 rank each, gloo):")
        print(f"  torchrun by hand:  {hand:6.2f} s  {[round(s, 2) for s in hand_s]}")
        print(f"  rtk torchrun:      {rtk:6.2f} s  {[round(s, 2) for s in rtk_s]}")
        print(f"  rtk adds {rtk - hand:.2f} s ({rtk / hand:.2f}x the hand-started time)")
    finally:
        subprocess.run(
            [sys.executable, "-m", "toolkit", "down", str(inventory)], env=env, capture_output=True
        )
        if not args.keep:
            sandbox.destroy()


if __name__ == "__main__":
    main()
