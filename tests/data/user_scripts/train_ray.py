"""A Ray Train TorchTrainer script (as in Ray's guides) with rtk's step markers.

Connects to the running cluster (RAY_ADDRESS), trains a small model with DDP on
--num-workers CPU workers, synthetic data.

    python train_ray.py --num-workers 3 --steps 8
"""

import argparse
import tempfile

import ray
import ray.train
import ray.train.torch
import torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from toolkit.markers.ray_train import StepMarkers, report


def train_loop_per_worker(config):
    steps = StepMarkers()
    torch.manual_seed(0)
    ids = torch.randint(0, 64, (512, 16))
    loader = ray.train.torch.prepare_data_loader(DataLoader(TensorDataset(ids), batch_size=8))
    model = ray.train.torch.prepare_model(nn.Sequential(nn.Embedding(64, 32), nn.Linear(32, 64)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    for (batch,) in steps.over(loader, tokens=lambda b: b[0].numel(), samples=lambda b: len(b[0])):
        logits = model(batch[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 64), batch[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps.loss(loss.item())
        done += 1
        if done >= config["steps"]:
            break
    report({"loss": loss.item()})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    ray.init()
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"steps": args.steps},
        scaling_config=ScalingConfig(
            num_workers=args.num_workers, use_gpu=False, placement_strategy="SPREAD"
        ),
        run_config=RunConfig(storage_path=tempfile.mkdtemp(prefix="ray-train-")),
    )
    result = trainer.fit()
    print(f"trained: {result.metrics}", flush=True)


if __name__ == "__main__":
    main()
