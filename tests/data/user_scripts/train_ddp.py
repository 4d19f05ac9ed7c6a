"""A plain DDP training script, as users write them for torchrun (no rtk in it).

    torchrun --nnodes 3 --nproc-per-node 1 --rdzv-backend c10d \
        --rdzv-endpoint HEAD:29400 train_ddp.py --steps 20

Gloo on CPU, NCCL on GPUs. For the tests, faults of one rank:

- --slow-rank R --slow-s S: rank R sleeps S seconds in every step before its forward
  pass (a slow input pipeline);
- --stop-rank R --stop-at N: rank R stops itself (SIGSTOP) at step N, as a debugger or
  a frozen node would;
- --hang-rank R --hang-at N: rank R spins forever in next_batch() at step N (an input
  pipeline stuck in a loop) before its all-reduce;
- --pause-every K --pause-s S: every rank pauses S seconds every K steps (a checkpoint).
"""

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20, help="steps per epoch at most")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-s", type=float, default=0.0)
    parser.add_argument("--stop-rank", type=int, default=-1)
    parser.add_argument("--stop-at", type=int, default=-1)
    parser.add_argument("--hang-rank", type=int, default=-1)
    parser.add_argument("--hang-at", type=int, default=-1)
    parser.add_argument("--pause-every", type=int, default=0)
    parser.add_argument("--pause-s", type=float, default=0.0)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank = dist.get_rank()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)

    torch.manual_seed(0)
    features = torch.randn(4096, 32)
    labels = (features.sum(dim=1, keepdim=True) > 0).float()
    dataset = TensorDataset(features, labels)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    model = DDP(model, device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.BCEWithLogitsLoss()

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            if step >= args.steps:
                break
            if rank == args.slow_rank:
                time.sleep(args.slow_s)
            if rank == args.stop_rank and step == args.stop_at:
                os.kill(os.getpid(), signal.SIGSTOP)
            if rank == args.hang_rank and step == args.hang_at:
                x, y = next_batch(x, y)
            if args.pause_every and step and step % args.pause_every == 0:
                time.sleep(args.pause_s)
            x, y = x.to(device), y.to(device)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if rank == 0 and step % 5 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)

    dist.destroy_process_group()


def next_batch(x, y):
    """A stuck input pipeline: it never returns."""
    spins = 0
    while True:
        spins += 1
        if spins < 0:
            return x, y


if __name__ == "__main__":
    main()
