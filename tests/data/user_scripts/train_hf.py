"""A Hugging Face Trainer run with rtk's callback: a tiny GPT-2 built from a config.

Random weights, synthetic tokens, nothing downloaded. Under rtk (RTK_RUN_DIR set) the
callback writes every optimizer step with its tokens; without rtk it writes nothing.

    python train_hf.py --max-steps 8
"""

import argparse
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from toolkit.markers.hf import RtkMarkersCallback


class RandomTokens(Dataset):
    def __init__(self, count, length, vocab):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (count, length), generator=generator)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    args = parser.parse_args()

    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=64)
    model = GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(
            output_dir=out,
            max_steps=args.max_steps,
            per_device_train_batch_size=args.batch_size,
            logging_steps=2,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            include_num_input_tokens_seen=True,
        )
        trainer = Trainer(
            model=model,
            args=training,
            train_dataset=RandomTokens(256, 32, config.vocab_size),
            callbacks=[RtkMarkersCallback()],
        )
        trainer.train()
    print(f"trained {args.max_steps} steps", flush=True)


if __name__ == "__main__":
    main()
