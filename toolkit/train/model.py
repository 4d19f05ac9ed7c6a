"""A GPT built from its shape alone (nothing downloaded): attention through SDPA."""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812 - the usual name
from torch import nn
from torch.utils.checkpoint import checkpoint

from toolkit.train.config import ModelShape


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a 4x GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block to ``x`` of shape (batch, time, width)."""
        batch, time, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        shape = (batch, time, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, time, width))
        out: torch.Tensor = x + self.down(F.gelu(self.up(self.norm2(x))))
        return out


class GPT(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a tied language-model head."""

    def __init__(self, shape: ModelShape, gradient_checkpointing: bool = False) -> None:
        super().__init__()
        self.shape = shape
        self.gradient_checkpointing = gradient_checkpointing
        self.tokens = nn.Embedding(shape.vocab_size, shape.width)
        self.positions = nn.Embedding(shape.seq_len, shape.width)
        self.blocks = nn.ModuleList(Block(shape.width, shape.heads) for _ in range(shape.layers))
        self.norm = nn.LayerNorm(shape.width)
        self.apply(_init)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for ``idx`` (batch, time); the mean cross-entropy when ``targets`` given."""
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tokens(idx) + self.positions(positions)
        for block in self.blocks:
            if self.gradient_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = F.linear(self.norm(x), self.tokens.weight)
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def _init(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
