"""A tiny causal LM made on the spot: a Llama config, random weights, a word-level tokenizer.

Nothing is downloaded: vLLM loads it from the directory like any local model. Its
throughput says nothing about a real model; it exercises the workload's path (load,
generate, markers, telemetry) on the GPU.
"""

from __future__ import annotations

from pathlib import Path

VOCAB_SIZE = 2048
SPECIAL = ("<unk>", "<s>", "</s>", "<pad>")


def build_tiny_model(directory: Path, seed: int = 0) -> Path:
    """Save the model and tokenizer into ``directory`` (once); returns it."""
    if (directory / "config.json").exists() and (directory / "tokenizer.json").exists():
        return directory
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate(SPECIAL)}
    vocab.update({f"w{i}": i for i in range(len(SPECIAL), VOCAB_SIZE)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    tokenizer.save_pretrained(directory)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(directory, safe_serialization=True)
    return directory
