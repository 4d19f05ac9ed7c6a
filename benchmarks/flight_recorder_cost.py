"""What PyTorch's Flight Recorder costs a collective, and what a dump of it costs.

Two gloo ranks on this machine run ``--calls`` small all-reduces (the cost of
recording shows most on a small one) in rounds, alternating the recorder off
(``TORCH_FR_BUFFER_SIZE=0``) and on with ``--buffer`` entries, each round in fresh
processes. Printed per setting: the best and median microseconds per all-reduce, and
the ratio of on to off; then how long one dump of a full ring takes (what rtk would
pay once per stall in each rank).

    python benchmarks/flight_recorder_cost.py [--calls 3000] [--buffer 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

RANK_CODE = """
import json, os, pickle, sys, time
import torch, torch.distributed as dist
rank, port, calls = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
t = torch.ones(256)
for _ in range(50):
    dist.all_reduce(t)
dist.barrier()
began = time.perf_counter()
for _ in range(calls):
    dist.all_reduce(t)
spent = time.perf_counter() - began
dump_s = None
if int(os.environ.get("TORCH_FR_BUFFER_SIZE", "0")):
    at = time.perf_counter()
    entries = pickle.loads(torch._C._distributed_c10d._dump_fr_trace(True, False, False))["entries"]
    dump_s = time.perf_counter() - at
    assert entries, "the recorder kept nothing"
if rank == 0:
    print(json.dumps({"us_per_call": spent / calls * 1e6, "dump_s": dump_s}))
dist.destroy_process_group()
"""


def one_round(buffer: int, calls: int, port: int) -> dict[str, float | None]:
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": str(buffer)}
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_CODE, str(r), str(port), str(calls)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    out = [p.communicate(timeout=600)[0] for p in ranks]
    found: dict[str, float | None] = json.loads(out[0].strip().splitlines()[-1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--buffer", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    times: dict[int, list[float]] = {0: [], args.buffer: []}
    dumps: list[float] = []
    port = 29700
    for round_number in range(args.rounds):
        for buffer in (0, args.buffer):
            port += 1
            got = one_round(buffer, args.calls, port)
            us = got["us_per_call"]
            assert us is not None
            times[buffer].append(us)
            if got["dump_s"] is not None:
                dumps.append(got["dump_s"])
            print(f"round {round_number + 1}: buffer {buffer:>5}: {us:8.1f} us/all-reduce")
    off, on = times[0], times[args.buffer]
    print(f"off: best {min(off):.1f} us, median {statistics.median(off):.1f} us")
    print(
        f"on ({args.buffer} entries): best {min(on):.1f} us, median {statistics.median(on):.1f} us"
    )
    print(
        f"ratio on/off: best {min(on) / min(off):.3f}, median "
        f"{statistics.median(on) / statistics.median(off):.3f}"
    )
    print(f"a dump of the full ring: median {statistics.median(dumps) * 1e3:.1f} ms")


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"({time.monotonic() - started:.0f} s)")
