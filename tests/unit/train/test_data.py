"""The synthetic task: every token is its predecessor's successor, batches are pure."""

from __future__ import annotations

import torch

from toolkit.train.data import SyntheticTokens


def test_every_target_is_its_inputs_successor_at_a_long_context() -> None:
    data = SyntheticTokens(vocab_size=50304, seq_len=1024, seed=7)
    x, y = data.batch(8, step=3, rank=1, micro=2)
    assert x.shape == y.shape == (8, 1024)
    assert x.dtype == y.dtype == torch.long
    assert torch.equal(y, data.successor[x])  # the rule the model learns
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    assert int(x.max()) < SyntheticTokens.SYMBOLS


def test_a_batch_is_a_function_of_seed_step_rank_and_micro_step() -> None:
    data = SyntheticTokens(vocab_size=256, seq_len=64, seed=3)
    again = SyntheticTokens(vocab_size=256, seq_len=64, seed=3)
    first = data.batch(16, 5, 0, 0)
    assert all(torch.equal(a, b) for a, b in zip(first, again.batch(16, 5, 0, 0), strict=True))
    for other in (data.batch(16, 6, 0, 0), data.batch(16, 5, 1, 0), data.batch(16, 5, 0, 1)):
        assert not torch.equal(first[0], other[0])
