"""Zeus's GlobalPowerLimitOptimizer on rtk's GPT, without Ray: ``gpu_acceptance.zeus_loop``.

The peer beside rtk's ``--power-policy optimize``: the same model (rtk's GPT at
CONFIG's size, built from its shape, bf16 autocast, AdamW, the batch rtk train uses,
random tokens) in a plain loop on GPU 0, with Zeus's optimizer called at every step's
start as Zeus's docs show (``ZeusMonitor`` on one GPU, ``MaxSlowdownConstraint`` at
rtk's bound). It profiles Zeus's grid of limits top down (``pl_step``), chooses, and
sets the choice; the loop then trains ``settled_steps`` more, measured by Zeus's
monitor. RESULT: the limit chosen, every limit's time and energy as Zeus measured them,
the steps and seconds profiling took, and the settled window. Zeus puts the GPU's
highest limit back at exit (its ``atexit``).

CONFIG (JSON): model_size, batch_size, max_slowdown, warmup_steps, profile_steps,
pl_step_w, settled_steps, max_steps.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def train(config: dict[str, Any]) -> dict[str, Any]:
    """Train under Zeus's optimizer until it chose and the settled window ran."""
    import torch
    from zeus.monitor import ZeusMonitor
    from zeus.optimizer.power_limit import (
        Done,
        GlobalPowerLimitOptimizer,
        MaxSlowdownConstraint,
    )

    from toolkit.train.config import PRESETS
    from toolkit.train.model import GPT

    shape = PRESETS[config["model_size"]]
    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    torch.manual_seed(0)
    model = GPT(shape).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
    batch = int(config["batch_size"])
    monitor = ZeusMonitor(gpu_indices=[0])
    began = time.monotonic()
    plo = GlobalPowerLimitOptimizer(
        monitor,
        optimum_selector=MaxSlowdownConstraint(factor=1.0 + float(config["max_slowdown"])),
        wait_steps=1,
        warmup_steps=int(config["warmup_steps"]),
        profile_steps=int(config["profile_steps"]),
        pl_step=int(config["pl_step_w"]),
    )
    grid_w = [p // 1000 for p in plo.power_limits]
    step, chosen_at, settled_done = 0, None, 0
    settled_window = "rtk-acceptance-settled"
    settled: dict[str, Any] = {}
    loss = torch.zeros((), device=device)
    while step < int(config["max_steps"]):
        plo.on_step_begin()
        tokens = torch.randint(0, shape.vocab_size, (batch, shape.seq_len + 1), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens[:, :-1], tokens[:, 1:])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if isinstance(plo.state, Done) and chosen_at is None:
            torch.cuda.synchronize()
            chosen_at = step
            profiling_s = time.monotonic() - began
            monitor.begin_window(settled_window)
        elif chosen_at is not None:
            settled_done += 1
            if settled_done >= int(config["settled_steps"]):
                window = monitor.end_window(settled_window)
                settled = {
                    "steps": settled_done,
                    "time_s": window.time,
                    "energy_j": window.total_energy,
                    "s_per_step": window.time / settled_done,
                    "j_per_step": window.total_energy / settled_done,
                }
                break
    measurements = [
        {"limit_w": m.power_limit, "time_s": m.time, "energy_j": m.energy} for m in plo.measurements
    ]
    result: dict[str, Any] = {
        "grid_w": grid_w,
        "measurements": measurements,
        "profile_steps_per_limit": int(config["warmup_steps"]) + int(config["profile_steps"]),
        "steps": step,
        "last_loss": float(loss.item()),
        "device": torch.cuda.get_device_name(0),
    }
    if chosen_at is not None:
        result |= {
            "chosen_limit_w": plo.state.optimal_power_limit // 1000,  # type: ignore[union-attr]
            "chosen_at_step": chosen_at,
            "profiling_s": profiling_s,
            "settled": settled,
        }
    return result


def main(argv: list[str]) -> int:
    """Train, write RESULT (also when the optimizer never chose)."""
    if len(argv) != 2:
        print("usage: python -m gpu_acceptance.zeus_loop CONFIG_JSON RESULT_JSON", file=sys.stderr)
        return 2
    result = train(json.loads(argv[0]))
    Path(argv[1]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
