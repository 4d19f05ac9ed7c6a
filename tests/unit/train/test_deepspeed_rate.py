"""DeepSpeed ZeRO-3 trains like DDP under a learning-rate warm-up.

One gloo rank on the CPU, the tiny GPT, a warm-up: the losses of the two runs must
agree step by step. A learning rate that reached DeepSpeed one step late (the first
warm-up step at the full rate) shows as DeepSpeed's losses leaving DDP's from step 2.
ZeRO-3 with optimizer offload is left to the GPU acceptance run: on the CPU it matched
ZeRO-3 to the last digit, and its CPU Adam is a C++ extension whose first build would
cost every fresh CI machine about two minutes.
"""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path

import pytest

# A plain import: without torch this module fails to load (in CI too), never skips.
import torch  # noqa: F401
from conftest import require

from toolkit.train.config import TrainConfig
from toolkit.train.local_processes import run_local

STRATEGIES = {
    "ddp": {"strategy": "ddp"},
    "zero3": {"strategy": "deepspeed", "zero_stage": 3},
}


def losses(tmp_path: Path, name: str) -> list[float]:
    run_dir = tmp_path / name
    config = TrainConfig(
        run_dir=str(run_dir),
        model_size="tiny",
        batch_size=8,
        max_steps=8,
        learning_rate=3e-3,
        warmup_steps=4,
        seed=3,
        **STRATEGIES[name],  # type: ignore[arg-type]
    )
    run_local(config, 1, tmp_path / f"rendezvous-{name}")
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [float(json.loads(line)["loss"]) for line in lines]


def test_zero3_tracks_ddp_under_a_warm_up(tmp_path: Path) -> None:
    require(
        find_spec("deepspeed") is not None,
        "deepspeed is not installed (pip install '.[deepspeed]')",
    )
    curves = {name: losses(tmp_path, name) for name in STRATEGIES}
    for name, curve in curves.items():
        assert len(curve) == 8, (name, curve)
        assert curve[-1] < 0.9 * curve[0], (name, curve)
    # DDP's rounding differs more and grows (0.4% by step 8); a first step at the full
    # rate instead of a quarter of it puts step 2 about 4% lower.
    assert curves["zero3"] == pytest.approx(curves["ddp"], rel=1e-2), curves
