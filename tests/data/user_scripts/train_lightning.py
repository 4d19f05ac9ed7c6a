"""A Lightning run with rtk's callback: a tiny language model on synthetic tokens.

python train_lightning.py --max-steps 8
"""

import argparse

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from toolkit.markers.lightning import RtkMarkersCallback


class RandomTokens(Dataset):
    def __init__(self, count, length, vocab):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (count, length), generator=generator)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index]}


class TinyLM(L.LightningModule):
    def __init__(self, vocab=64, width=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, vocab)

    def training_step(self, batch, batch_idx):
        ids = batch["input_ids"]
        logits = self.head(self.embed(ids[:, :-1]))
        return nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1)
        )

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=8)
    args = parser.parse_args()
    trainer = L.Trainer(
        max_steps=args.max_steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[RtkMarkersCallback()],
    )
    trainer.fit(TinyLM(), DataLoader(RandomTokens(256, 32, 64), batch_size=4))
    print(f"trained {args.max_steps} steps", flush=True)


if __name__ == "__main__":
    main()
