"""A matmul loop on every GPU: ``python -m gpu_acceptance.load --seconds S``.

Prints ``ready`` once the first multiplications finished on every GPU, then keeps the
GPUs busy until ``--seconds`` passed or SIGTERM came, and prints one JSON line with
the iterations and the TFLOP/s it sustained.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Mapping
from types import FrameType
from typing import Any

from gpu_acceptance import procs

_stop = False
READY_TIMEOUT_S = 120.0


def start(python: str, env: Mapping[str, str], seconds: float) -> procs.Background:
    """Start the load and wait until every GPU is busy.

    Raises:
        RuntimeError: It did not get ready (no CUDA, an error, too slow).
    """
    argv = [python, "-m", "gpu_acceptance.load", "--seconds", f"{seconds:g}"]
    load = procs.Background(argv, env=env)
    if load.wait_for("ready", READY_TIMEOUT_S) is None:
        left = load.stop()
        raise RuntimeError(f"the matmul load did not start: {procs.tail(left.strip(), 400)}")
    return load


def finish(load: procs.Background) -> dict[str, Any]:
    """Stop the load; what it reported (iterations, TFLOP/s per GPU)."""
    left = load.stop(grace_s=15.0)
    for line in reversed(left.splitlines()):
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            return result
    return {"error": "the load printed no result"}


def _on_term(signum: int, frame: FrameType | None) -> None:
    global _stop
    _stop = True


def main(argv: list[str]) -> int:
    """Run the load; 0 when it ran."""
    parser = argparse.ArgumentParser(prog="python -m gpu_acceptance.load")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--size", type=int, default=8192)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_term)
    import torch

    devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    if not devices:
        print(json.dumps({"error": "no CUDA device"}), flush=True)
        return 1
    pairs = []
    for device in devices:
        a = torch.randn(args.size, args.size, device=device, dtype=torch.bfloat16)
        b = torch.randn(args.size, args.size, device=device, dtype=torch.bfloat16)
        pairs.append((a, b))
    for a, b in pairs:
        torch.matmul(a, b)
    for device in devices:
        torch.cuda.synchronize(device)
    print("ready", flush=True)
    began = time.monotonic()
    iterations = 0
    while not _stop and time.monotonic() - began < args.seconds:
        for a, b in pairs:
            torch.matmul(a, b)
        iterations += 1
        if iterations % 10 == 0:  # keep the queue short so a stop is quick
            for device in devices:
                torch.cuda.synchronize(device)
    for device in devices:
        torch.cuda.synchronize(device)
    elapsed_s = time.monotonic() - began
    flops = 2.0 * args.size**3 * iterations * len(devices)
    result = {
        "iterations": iterations,
        "seconds": round(elapsed_s, 3),
        "tflops_per_gpu": flops / elapsed_s / len(devices) / 1e12 if elapsed_s > 0 else None,
        "gpus": len(devices),
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
