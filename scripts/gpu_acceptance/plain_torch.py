"""A plain PyTorch training loop that imports nothing of rtk: ``ray-record`` wraps it.

An MLP learns a fixed random linear map, in bf16 autocast on the GPU (fp32 on the CPU
when there is none), for ``--seconds``. It prints its loss every 50 steps and a last
line with its steps and rate, as any user's script would; ``rtk telemetry record``
samples the GPUs while it runs and builds the report after.

    python plain_torch.py [--seconds 20] [--width 4096] [--batch 4096]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


def main() -> None:
    """Train until the time is up; print the loss and the rate."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=4096)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    width = args.width
    model = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
    model = model.to(device)
    target = nn.Linear(width, width, bias=False).to(device).requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    began, step, loss = time.monotonic(), 0, torch.zeros(())
    while time.monotonic() - began < args.seconds:
        x = torch.randn(args.batch, width, device=device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = nn.functional.mse_loss(model(x).float(), target(x).float())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.5f}", flush=True)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.monotonic() - began
    print(f"done: {step} steps in {seconds:.1f} s on {device}, loss {loss.item():.5f}", flush=True)


if __name__ == "__main__":
    main()
