"""rtk's trainer without Ray: ``python -m gpu_acceptance.trainer CONFIG RESULT [--kernels N]``.

CONFIG is a ``TrainConfig`` as JSON. The process is rank 0 of a world of one: it sets
up the process group (NCCL on a GPU; ``toolkit/train/local_processes.py``'s
``run_local`` uses gloo, which FSDP2's collectives on CUDA tensors do not have) and runs
the same ``train_worker`` loop with its ``LocalContext`` that Ray Train workers run, so
markers and metrics land in the run directory as rtk writes them. RESULT gets the
last step's metrics and the peak GPU memory; with ``--kernels N``, the whole run is
under ``torch.profiler`` and RESULT also gets its N heaviest CUDA kernels.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def train(config: dict[str, Any], kernels: int = 0) -> dict[str, Any]:
    """Train one run as rank 0 of 1; the last metrics, peak memory and the backend.

    With ``kernels`` (and CUDA), the run is profiled and ``kernels`` holds its heaviest
    kernels (``gpu_acceptance.kernels.top_kernels``).
    """
    for key, value in (
        ("RANK", "0"),
        ("LOCAL_RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("LOCAL_WORLD_SIZE", "1"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", str(free_port())),
    ):
        os.environ.setdefault(key, value)
    import torch
    import torch.distributed as dist

    from toolkit.train.config import TrainConfig
    from toolkit.train.local_processes import LocalContext
    from toolkit.train.loop import train_worker

    cfg = TrainConfig.from_json(config).check()
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(0)
        torch.cuda.reset_peak_memory_stats()
    began = time.monotonic()
    dist.init_process_group(backend, rank=0, world_size=1)
    profiled = kernels > 0 and cuda
    profiler = (
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
        if profiled
        else contextlib.nullcontext()
    )
    try:
        with profiler:
            last = train_worker(cfg, LocalContext(0, 1, Path(cfg.run_dir), cfg.keep_checkpoints))
    finally:
        dist.destroy_process_group()
    result: dict[str, Any] = {
        "backend": backend,
        "last": last.to_json() if last is not None else {},
        "seconds": time.monotonic() - began,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
    }
    if cuda:
        result["peak_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        result["peak_memory_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
    if profiled:
        from gpu_acceptance.kernels import kernel_rows, top_kernels

        assert isinstance(profiler, torch.profiler.profile)
        result["kernels"] = top_kernels(kernel_rows(profiler.key_averages(), "cuda"), kernels)
    return result


def main(argv: list[str]) -> int:
    """Train, write RESULT; 0 when training finished."""
    kernels = 0
    if len(argv) == 4 and argv[2] == "--kernels" and argv[3].isdigit():
        kernels, argv = int(argv[3]), argv[:2]
    if len(argv) != 2:
        print(
            "usage: python -m gpu_acceptance.trainer CONFIG_JSON RESULT_JSON [--kernels N]",
            file=sys.stderr,
        )
        return 2
    result = train(json.loads(argv[0]), kernels)
    Path(argv[1]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
