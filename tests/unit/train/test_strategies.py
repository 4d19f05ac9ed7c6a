"""What the seed guides' --gradient_accumulation_steps and --precision do in the trainer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from toolkit.train.config import PRESETS, TrainConfig
from toolkit.train.data import SyntheticTokens
from toolkit.train.local_processes import run_local
from toolkit.train.model import GPT
from toolkit.train.strategies import Strategy

SHAPE = PRESETS["tiny"]
CPU = torch.device("cpu")


def strategy(**options: object) -> Strategy:
    torch.manual_seed(0)  # the same initial weights for every strategy made here
    return Strategy(GPT(SHAPE), TrainConfig(run_dir="r", **options), CPU, 0)  # type: ignore[arg-type]


def batches(size: int, micro_steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    data = SyntheticTokens(SHAPE.vocab_size, SHAPE.seq_len, seed=5)
    return [data.batch(size, 1, 0, micro) for micro in range(micro_steps)]


def test_four_micro_batches_of_two_step_as_one_batch_of_eight() -> None:
    accumulated = strategy(batch_size=2, gradient_accumulation_steps=4)
    whole = strategy(batch_size=8, gradient_accumulation_steps=1)
    micro = batches(2, 4)
    for i, (x, y) in enumerate(micro):
        accumulated.micro_step(x, y, last=i == len(micro) - 1)
    whole.micro_step(torch.cat([x for x, _ in micro]), torch.cat([y for _, y in micro]), last=True)

    pairs = list(zip(accumulated.model.parameters(), whole.model.parameters(), strict=True))
    for a, b in pairs:
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6)
    for s in (accumulated, whole):
        s.set_learning_rate(1e-2)
        s.optimizer_step()
    for a, b in pairs:
        # Adam's first step is about lr x sign(gradient): near-zero gradients that
        # differ in float rounding move a weight a little differently, never by ~lr.
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        assert a.grad is None  # cleared for the next step's micro-batches


def test_one_micro_batch_alone_is_not_the_accumulated_step() -> None:
    # The comparison above can fail: a quarter of the batch gives another gradient.
    accumulated = strategy(batch_size=2, gradient_accumulation_steps=4)
    single = strategy(batch_size=2, gradient_accumulation_steps=1)
    micro = batches(2, 4)
    for i, (x, y) in enumerate(micro):
        accumulated.micro_step(x, y, last=i == len(micro) - 1)
    single.micro_step(*micro[0], last=True)
    a = next(accumulated.model.parameters()).grad
    b = next(single.model.parameters()).grad
    assert a is not None and b is not None and not torch.allclose(a, b, rtol=1e-3)


@pytest.mark.parametrize(
    ("precision", "dtype"), [("fp32", torch.float32), ("bf16", torch.bfloat16)]
)
def test_precision_is_the_compute_dtype_on_cpu(precision: str, dtype: torch.dtype) -> None:
    bf16 = strategy(precision=precision)
    seen: list[torch.dtype] = []
    layer = bf16.module().blocks[0].qkv  # type: ignore[index,union-attr]
    layer.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    loss = bf16.micro_step(*batches(2, 1)[0], last=True)
    assert seen == [dtype]
    assert loss > 0
    # The weights and their gradients stay fp32 (autocast, not a cast of the model).
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())
    assert all(
        p.grad is not None and p.grad.dtype == torch.float32 for p in bf16.model.parameters()
    )


def test_the_seed_settings_scaled_to_tiny_train_on_cpu_ranks(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    config = TrainConfig(
        run_dir=str(run_dir),
        batch_size=2,
        gradient_accumulation_steps=4,
        precision="bf16",
        max_steps=12,
        save_steps=6,
        seed=3,
    )
    run_local(config, 2, tmp_path / "rendezvous")
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, 13))
    # Tokens per optimizer step: batch x accumulation x sequence x ranks.
    assert {m["tokens"] for m in metrics} == {2 * 4 * SHAPE.seq_len * 2}
    assert metrics[-1]["loss"] < 0.8 * metrics[0]["loss"]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "step-00006",
        "step-00012",
    ]
