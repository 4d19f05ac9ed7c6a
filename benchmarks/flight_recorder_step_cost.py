"""What PyTorch's Flight Recorder costs a DDP training step (target: at most 1%).

Two gloo ranks on this machine train an MLP with DistributedDataParallel, as the
sandbox's DDP scripts do (``tests/data/user_scripts/train_ddp.py``: forward, backward
with DDP's gradient all-reduce, the optimizer), ``--steps`` steps a round, timed on
rank 0 after a warm-up. Rounds alternate the recorder off (``TORCH_FR_BUFFER_SIZE=0``)
and on at rtk's 500 entries (which goes first swaps every round), each in fresh
processes. Printed per setting: the median
and best milliseconds per step over the rounds, and the ratio of on to off, once for a
small model (a step of about a millisecond: the recorder's share is largest) and once
for a wider one (``--hidden``).

Measured on the 2-core machine (2026-11-29, 10 rounds of 1,000 steps): on/off 1.037
(medians) and 0.946 (bests) at a 1.9 ms step, 0.940 and 0.974 at a 2.5 ms step: the
recorder's cost is inside the round-to-round noise (about 6%), and no larger than
that at steps of a few milliseconds. Measured apart (2026-11-29, two runs of 6 rounds
of 20,000 calls): a one-rank all-reduce took 36.6 us off and 36.7 / 35.9 us on, so the
recorder costs within 1 us of nothing a collective; a DDP step here issues one
collective (its one gradient bucket), so its share of a 1.5 ms step is under 0.07%,
and would stay under 1% at ten times that cost.

    python benchmarks/flight_recorder_step_cost.py [--steps 400] [--rounds 10] [--calls 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys

RANK_CODE = """
import json, os, pickle, sys, time
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
rank, port, steps, hidden = (int(a) for a in sys.argv[1:5])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
torch.manual_seed(0)
torch.set_num_threads(1)
model = DDP(nn.Sequential(nn.Linear(32, hidden), nn.ReLU(), nn.Linear(hidden, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
x, y = torch.randn(16, 32), torch.randn(16, 1)
def step():
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
def last_seq():
    if not int(os.environ.get("TORCH_FR_BUFFER_SIZE", "0")):
        return None
    dump = pickle.loads(torch._C._distributed_c10d._dump_fr_trace(True, False, False))
    return max(e["collective_seq_id"] for e in dump["entries"])
for _ in range(30):
    step()
dist.barrier()
first = last_seq()
began = time.perf_counter()
for _ in range(steps):
    step()
spent = time.perf_counter() - began
last = last_seq()
if rank == 0:
    per_step = (last - first) / steps if first is not None else None
    print(json.dumps({"ms_per_step": spent / steps * 1e3, "collectives_per_step": per_step}))
dist.destroy_process_group()
"""

# The recorder's own work: one rank, one-element all-reduces, nothing else.
ALONE_CODE = """
import json, sys, time
import torch, torch.distributed as dist
port, calls = int(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
torch.set_num_threads(1)
t = torch.ones(1)
for _ in range(1000):
    dist.all_reduce(t)
began = time.perf_counter()
for _ in range(calls):
    dist.all_reduce(t)
print(json.dumps({"us_per_call": (time.perf_counter() - began) / calls * 1e6}))
dist.destroy_process_group()
"""

BUFFER = 500  # rtk's (toolkit.stall.flight.collectives.FLIGHT_RECORDER_ENTRIES)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_round(buffer: int, steps: int, hidden: int) -> dict[str, float | None]:
    """A round with the recorder at ``buffer`` entries: ms per step, collectives per step."""
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": str(buffer), "OMP_NUM_THREADS": "1"}
    port = free_port()
    argv = [sys.executable, "-c", RANK_CODE]
    ranks = [
        subprocess.Popen([*argv, str(r), str(port), str(steps), str(hidden)], env=env,
                         stdout=subprocess.PIPE, text=True)
        for r in range(2)
    ]  # fmt: skip
    out = [p.communicate(timeout=600)[0] for p in ranks]
    found: dict[str, float | None] = json.loads(out[0].strip().splitlines()[-1])
    return found


def alone_round(buffer: int, calls: int) -> float:
    """Microseconds per one-element all-reduce on a group of one, recorder at ``buffer``."""
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": str(buffer), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-c", ALONE_CODE, str(free_port()), str(calls)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1])["us_per_call"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=2048, help="the wider model's width")
    parser.add_argument("--calls", type=int, default=20_000, help="all-reduces a round, alone")
    args = parser.parse_args()
    alone: dict[int, list[float]] = {0: [], BUFFER: []}
    for i in range(args.rounds):
        for buffer in (0, BUFFER) if i % 2 == 0 else (BUFFER, 0):
            alone[buffer].append(alone_round(buffer, args.calls))
    off_us, on_us = (statistics.median(alone[b]) for b in (0, BUFFER))
    cost_us = on_us - off_us
    print(
        f"alone: off {off_us:.2f} us/all-reduce, on ({BUFFER}) {on_us:.2f}: "
        f"the recorder costs {cost_us:.2f} us a collective (medians of {args.rounds})",
        flush=True,
    )
    for hidden in (64, args.hidden):
        times: dict[int, list[float]] = {0: [], BUFFER: []}
        per_step: list[float] = []
        for i in range(args.rounds):
            # Off first in even rounds, on first in odd ones: neither always runs warm.
            for buffer in (0, BUFFER) if i % 2 == 0 else (BUFFER, 0):
                found = one_round(buffer, args.steps, hidden)
                times[buffer].append(float(found["ms_per_step"] or 0.0))
                if found["collectives_per_step"] is not None:
                    per_step.append(float(found["collectives_per_step"]))
        off, on = (statistics.median(times[b]) for b in (0, BUFFER))
        collectives = statistics.median(per_step)
        share = cost_us * collectives / (off * 1e3)
        print(
            f"hidden {hidden}: off {off:.3f} ms/step (best {min(times[0]):.3f}), "
            f"on ({BUFFER}) {on:.3f} ms/step (best {min(times[BUFFER]):.3f}); "
            f"on/off {on / off:.3f} (medians), {min(times[BUFFER]) / min(times[0]):.3f} (bests); "
            f"{collectives:g} collectives a step x {cost_us:.2f} us = {share:.3%} of a step",
            flush=True,
        )


if __name__ == "__main__":
    main()
