"""rtk's trainer without Ray: ``python -m gpu_acceptance.trainer CONFIG RESULT``, one run.

CONFIG is a ``TrainConfig`` as JSON. The process is rank 0 of a world of one: it sets
up the process group (NCCL on a GPU; ``toolkit/train/local.py``'s ``run_local`` uses
gloo, which FSDP2's collectives on CUDA tensors do not have) and runs the same
``train_worker`` loop with ``local.py``'s ``LocalContext`` that Ray Train workers run,
so markers and metrics land in the run directory as rtk writes them. RESULT gets the
last step's metrics and the peak GPU memory.
"""

from __future__ import annotations

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


def train(config: dict[str, Any]) -> dict[str, Any]:
    """Train one run as rank 0 of 1; the last metrics, peak memory and the backend."""
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
    from toolkit.train.local import LocalContext
    from toolkit.train.loop import train_worker

    cfg = TrainConfig.from_json(config).check()
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(0)
        torch.cuda.reset_peak_memory_stats()
    began = time.monotonic()
    dist.init_process_group(backend, rank=0, world_size=1)
    try:
        last = train_worker(cfg, LocalContext(0, 1, Path(cfg.run_dir), cfg.keep_checkpoints))
    finally:
        dist.destroy_process_group()
    result: dict[str, Any] = {
        "backend": backend,
        "last": last,
        "seconds": time.monotonic() - began,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
    }
    if cuda:
        result["peak_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        result["peak_memory_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
    return result


def main(argv: list[str]) -> int:
    """Train, write RESULT; 0 when training finished."""
    if len(argv) != 2:
        print("usage: python -m gpu_acceptance.trainer CONFIG_JSON RESULT_JSON", file=sys.stderr)
        return 2
    result = train(json.loads(argv[0]))
    Path(argv[1]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
