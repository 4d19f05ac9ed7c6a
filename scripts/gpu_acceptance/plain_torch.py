"""A plain PyTorch training loop that imports nothing of rtk: a user's script.

An MLP learns a fixed random linear map, in bf16 autocast on the GPU (fp32 on the CPU
when there is none), for ``--seconds`` or ``--steps``. Started by torchrun (its
``LOCAL_RANK`` in the environment), it is a plain DDP script: a process group on NCCL
(gloo without a GPU), the model in ``DistributedDataParallel``, one GPU per rank.
Rank 0 prints its loss every 50 steps and a last line with its steps and rate, as any
user's script would. ``ray-record`` runs it under ``rtk telemetry record``, and
``ray-torchrun`` under ``rtk torchrun --auto-steps``, which counts its steps from the
optimizer without a line of rtk in it.

    python plain_torch.py [--seconds 20 | --steps N] [--width 4096] [--batch 4096]
    torchrun --nproc-per-node 1 plain_torch.py --steps 200
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    """Train until the time or the steps are up; print the loss and the rate."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--steps", type=int, default=0, help="stop after N steps (0: time)")
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=4096)
    args = parser.parse_args()
    distributed = "LOCAL_RANK" in os.environ
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    if distributed:
        dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank() if distributed else 0
    torch.manual_seed(0)
    width = args.width
    model: nn.Module = nn.Sequential(
        nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
    ).to(device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank] if cuda else None
        )
    target = nn.Linear(width, width, bias=False).to(device).requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    began, step, loss = time.monotonic(), 0, torch.zeros(())
    while (step < args.steps) if args.steps else (time.monotonic() - began < args.seconds):
        x = torch.randn(args.batch, width, device=device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = nn.functional.mse_loss(model(x).float(), target(x).float())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if step % 50 == 0 and rank == 0:
            print(f"step {step} loss {loss.item():.5f}", flush=True)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.monotonic() - began
    if rank == 0:
        print(
            f"done: {step} steps in {seconds:.1f} s on {device.type}, loss {loss.item():.5f}",
            flush=True,
        )
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
