"""A plain data-parallel script with one fault injected, for rtk's stall suite (no rtk in it).

    torchrun --nnodes 3 --nproc-per-node 1 --rdzv-backend c10d \
        --rdzv-endpoint HEAD:29400 faults.py --fault skip --rank 1 --at 5

Each step reads a batch from a DataLoader, runs forward and backward, averages the
gradients with one all_reduce of them all (flattened), and steps the optimizer, as
scripts written before DDP do. Gloo on CPU, NCCL on GPUs. The faults, in rank
``--rank`` at step ``--at`` (every rank for the controls):

- stop: the rank stops itself (SIGSTOP), as a debugger or a frozen node would;
- sleep: the rank sleeps in user code before its all_reduce (an hour);
- skip: the rank skips that step's all_reduce: from then on it is one collective
  behind the others, and the run hangs only at the end, in the last collective;
- swap: the rank calls broadcast where the others call all_reduce;
- size: the rank all-reduces half of its gradients;
- kill: the rank kills itself (SIGKILL);
- loader: the rank's data-loader worker sleeps for an hour before that batch;
- uneven (control): every step takes a different time, up to three times another's;
- checkpoint (control): every rank pauses ``--pause-s`` at that step, writing a
  checkpoint, as a long save does.

Each rank prints ``fault FAULT rank R step N wall T`` the moment it injects its fault.
"""

import argparse
import os
import signal
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset

FAULTS = ("none", "stop", "sleep", "skip", "swap", "size", "kill", "loader", "uneven", "checkpoint")


class Batches(Dataset):
    """Synthetic batches; with --fault loader, the worker sleeps before batch ``stuck_at``."""

    def __init__(self, steps, stuck_at=-1, rank=0):
        self.steps = steps
        self.stuck_at = stuck_at
        self.rank = rank

    def __len__(self):
        return self.steps

    def __getitem__(self, index):
        if index == self.stuck_at:
            announce("loader", self.rank, index)
            time.sleep(3600)
        generator = torch.Generator().manual_seed(index)
        x = torch.randn(16, 32, generator=generator)
        return x, (x.sum(dim=1, keepdim=True) > 0).float()


def announce(fault, rank, step):
    print(f"fault {fault} rank {rank} step {step} wall {time.time():.3f}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", choices=FAULTS, default="none")
    parser.add_argument("--rank", type=int, default=1, help="the rank the fault is in")
    parser.add_argument("--at", type=int, default=5, help="the step it comes at")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--step-s", type=float, default=0.2, help="each step's own work")
    parser.add_argument("--pause-s", type=float, default=12.0)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    mine = rank == args.rank
    faulty = args.fault if mine or args.fault in ("uneven", "checkpoint") else "none"

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    loss_fn = nn.BCEWithLogitsLoss()
    stuck_at = args.at if faulty == "loader" else -1
    loader = DataLoader(Batches(args.steps, stuck_at, rank), batch_size=None, num_workers=1)

    for step, (x, y) in enumerate(loader):
        if step == args.at and faulty in ("stop", "sleep", "kill"):
            announce(faulty, rank, step)
            if faulty == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            elif faulty == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            else:
                time.sleep(3600)
        if step == args.at and faulty == "checkpoint":
            announce(faulty, rank, step)
            with tempfile.TemporaryDirectory() as folder:
                torch.save(model.state_dict(), os.path.join(folder, "checkpoint.pt"))
                time.sleep(args.pause_s)
        work_s = args.step_s * (1 + (step * 7 + rank) % 3) if faulty == "uneven" else args.step_s
        time.sleep(work_s)
        x, y = x.to(device), y.to(device)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        if step == args.at and faulty in ("skip", "swap", "size"):
            announce(faulty, rank, step)
        if step == args.at and faulty == "skip":
            pass
        elif step == args.at and faulty == "swap":
            dist.broadcast(grads, src=0)
        elif step == args.at and faulty == "size":
            dist.all_reduce(grads[: grads.numel() // 2])
        else:
            dist.all_reduce(grads)
        grads /= world
        offset = 0
        for p in model.parameters():
            p.grad.copy_(grads[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        optimizer.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)

    # The end of the run, as most scripts end it: every rank agrees it is done.
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
