"""One NCCL rank's Flight Recorder and NCCL's RAS view, as rtk reads them on a stall.

    python -m gpu_acceptance.nccl_flight OUT.json

Run by the stage ``flight-nccl`` with ``TORCH_FR_BUFFER_SIZE`` set: one rank on GPU 0
(NCCL takes a GPU per rank; a lent machine has one), six all_reduces of 1 MiB and a
broadcast, each waited for, then one all_reduce left in flight while the dump is taken.
Writes OUT.json: the NCCL version, rtk's own dump of the recorder
(``toolkit.markers.flight.flight_recorder_dump``, the fixture the CPU tests want), and
``ncclras -f json``'s answer when that client is on PATH (NCCL 2.24 and later ship it
with their source, not in pip's wheel).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from toolkit.markers.flight import flight_recorder_dump


def free_port() -> int:
    """A free TCP port on this machine."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ras_answer() -> dict[str, object]:
    """``ncclras -f json``'s answer (or why there is none)."""
    client = shutil.which("ncclras")
    if client is None:
        return {"error": "no ncclras client on PATH"}
    try:
        done = subprocess.run(
            [client, "-f", "json", "-t", "5"], capture_output=True, text=True, timeout=15
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr[-2000:]}


def main(out: Path) -> int:
    """Run the collectives, dump, ask RAS; write ``out``."""
    torch.cuda.set_device(0)
    port = free_port()
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    t = torch.ones(256 * 1024, device="cuda")  # 1 MiB of float32
    for _ in range(6):
        dist.all_reduce(t)
    dist.broadcast(t, src=0)
    torch.cuda.synchronize()
    dist.all_reduce(t, async_op=True)  # in flight, or just done, when the dump is taken
    dump = flight_recorder_dump()
    answer = {
        "nccl_version": ".".join(str(v) for v in torch.cuda.nccl.version()),
        "torch": torch.__version__,
        "fr_buffer_size": os.environ.get("TORCH_FR_BUFFER_SIZE"),
        "dump": dump,
        "ras": ras_answer(),
    }
    torch.cuda.synchronize()
    dist.destroy_process_group()
    out.write_text(json.dumps(answer, indent=1) + "\n")
    return 0 if dump is not None else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
