"""Training batches: a learnable synthetic task, or a local text file read as bytes.

Every batch is a pure function of (seed, step, rank, micro-step), so the data
position of a run is just its step: a resumed run sees exactly the batches it
would have seen, and no rank ever repeats another's.
"""

from __future__ import annotations

from pathlib import Path

import torch

from toolkit.errors import RtkError


class SyntheticTokens:
    """Sequences that follow a fixed random successor table, so the loss can go to ~0.

    They use the first ``SYMBOLS`` token ids (of any vocabulary), which a tiny model
    learns within tens of steps; the model still predicts over its whole vocabulary.
    """

    SYMBOLS = 32

    def __init__(self, vocab_size: int, seq_len: int, seed: int) -> None:
        self.vocab_size = min(vocab_size, self.SYMBOLS)
        self.seq_len = seq_len
        self.seed = seed
        table = torch.Generator().manual_seed(seed)
        self.successor = torch.randperm(self.vocab_size, generator=table)
        # A sequence is fixed by its first token: walk the table once per symbol here,
        # so a batch is one lookup (a walk per batch took ~5 ms of host time per
        # micro-step at seq_len 1024, a GPU idling meanwhile).
        walks = torch.empty(self.vocab_size, seq_len + 1, dtype=torch.long)
        walks[:, 0] = torch.arange(self.vocab_size)
        for t in range(1, seq_len + 1):
            walks[:, t] = self.successor[walks[:, t - 1]]
        self.walks = walks

    def batch(
        self, batch_size: int, step: int, rank: int, micro: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-token targets, each (batch_size, seq_len)."""
        gen = torch.Generator().manual_seed(_mix(self.seed, step, rank, micro))
        start = torch.randint(0, self.vocab_size, (batch_size,), generator=gen)
        tokens = self.walks[start]
        return tokens[:, :-1], tokens[:, 1:]


class ByteText:
    """A local text file as bytes (a byte-level tokenizer: vocabulary 256)."""

    def __init__(self, path: str, seq_len: int, seed: int) -> None:
        try:
            raw = Path(path).read_bytes()
        except OSError as e:
            raise RtkError(f"--data {path}: cannot read it: {e}") from e
        if len(raw) < seq_len + 2:
            raise RtkError(
                f"--data {path}: {len(raw)} bytes, fewer than one sequence of "
                f"{seq_len + 1}; give a longer file or a smaller --seq-len"
            )
        self.data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()
        self.seq_len = seq_len
        self.seed = seed

    def batch(
        self, batch_size: int, step: int, rank: int, micro: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random windows of the file: inputs and next-byte targets."""
        gen = torch.Generator().manual_seed(_mix(self.seed, step, rank, micro))
        starts = torch.randint(0, len(self.data) - self.seq_len - 1, (batch_size,), generator=gen)
        windows = torch.stack([self.data[s : s + self.seq_len + 1] for s in starts.tolist()])
        return windows[:, :-1], windows[:, 1:]


def make_data(
    path: str | None, vocab_size: int, seq_len: int, seed: int
) -> SyntheticTokens | ByteText:
    """Byte-level text when ``path`` is given, else synthetic tokens."""
    if path is not None:
        return ByteText(path, seq_len, seed)
    return SyntheticTokens(vocab_size, seq_len, seed)


def _mix(*values: int) -> int:
    state = 0x9E3779B97F4A7C15
    for value in values:
        state = (state ^ (value + 0x9E3779B97F4A7C15 + (state << 6) + (state >> 2))) & (2**63 - 1)
    return state
