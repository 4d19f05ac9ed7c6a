"""Wrapping the model for DDP, FSDP2 or DeepSpeed, and saving/loading their state.

Each strategy exposes the same small surface to the loop: ``set_learning_rate`` (before
a step's micro-batches), ``micro_step`` (forward and backward of one micro-batch),
``optimizer_step``, ``save`` and ``load``. Only rank 0
writes model state for DDP and FSDP2; DeepSpeed writes its own sharded files on
every rank (ZeRO partitions the optimizer).

With ``TrainConfig.compiles`` the model is compiled in place where each wrapper
wants it: DDP compiles the inner module (its forward stays eager, so DDPOptimizer
splits the graph at the gradient buckets and ``no_sync`` works); FSDP2 compiles each
transformer block before ``fully_shard`` (the sharding hooks stay eager, around the
compiled blocks); DeepSpeed compiles through its engine (``engine.compile``).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from toolkit.json_types import JsonObject
from toolkit.train.checkpoint_meta import CheckpointMeta
from toolkit.train.compiling import compile_in_place
from toolkit.train.config import TrainConfig
from toolkit.train.model import GPT

STATE_FILE = "state.pt"
DEEPSPEED_TAG = "ds"


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype for ``precision`` (None for fp32)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device``; to a GPU from pinned memory, without waiting for it.

    A copy from pageable memory waits for the GPU to finish its queued work first, so
    each micro-batch would wait for the last one's backward.
    """
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.contiguous().pin_memory().to(device, non_blocking=True)


class Strategy:
    """DDP (and the base for FSDP2): a torch optimizer over a wrapped module."""

    def __init__(self, model: GPT, config: TrainConfig, device: torch.device, rank: int) -> None:
        self.config = config
        self.device = device
        self.rank = rank
        self.compiled = config.compiles(device.type)
        self.model = self.wrap(model.to(device))
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=config.learning_rate,
            weight_decay=config.weight_decay,
            fused=device.type == "cuda",  # one kernel for all parameters, as real trainers do
        )
        dtype = autocast_dtype(config.precision)
        self.dtype = dtype
        use_scaler = config.precision == "fp16" and device.type == "cuda"
        self.scaler = torch.amp.GradScaler("cuda") if use_scaler else None

    def wrap(self, model: nn.Module) -> nn.Module:
        """DDP tuned for overlap: gradients as bucket views, no buffer broadcast.

        A compiled model is compiled before it is wrapped, as PyTorch's guide to
        where to apply torch.compile shows for DDP.
        """
        if self.compiled:
            compile_in_place(model, self.config.compile_backend)
        if not dist.is_initialized() or dist.get_world_size() == 1:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        with warnings.catch_warnings():
            # torch 2.13 prefers forward_sync_buffers, which still syncs at init; the
            # GPT has no buffers, and broadcast_buffers=False is the documented switch.
            warnings.filterwarnings("ignore", message=".*broadcast_buffers.*")
            return nn.parallel.DistributedDataParallel(
                model,
                device_ids=ids,
                gradient_as_bucket_view=True,
                broadcast_buffers=False,
                bucket_cap_mb=self.config.bucket_cap_mb,
            )

    @contextlib.contextmanager
    def _no_sync(self, last: bool) -> Iterator[None]:
        no_sync = getattr(self.model, "no_sync", None)
        if last or no_sync is None:
            yield
        else:
            with no_sync():
                yield

    def micro_step(self, x: torch.Tensor, y: torch.Tensor, last: bool) -> torch.Tensor:
        """Forward and backward of one micro-batch; gradients sync on the last one.

        Returns the loss as a detached tensor on the device: reading it waits for the
        GPU, which the loop does once per step, not once per micro-batch.
        """
        with self._no_sync(last):
            with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None):
                loss = self.model(to_device(x, self.device), to_device(y, self.device))
            scaled = loss / self.config.gradient_accumulation_steps
            if self.scaler is not None:
                self.scaler.scale(scaled).backward()
            else:
                scaled.backward()
        detached: torch.Tensor = loss.detach()
        return detached

    def set_learning_rate(self, lr: float) -> None:
        """The learning rate of the step about to run; call it before its micro-batches.

        DeepSpeed applies the update inside the last ``micro_step``, so a rate set after
        the micro-batches would reach the optimizer one step late.
        """
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def optimizer_step(self) -> None:
        """Apply the accumulated gradients."""
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def module(self) -> nn.Module:
        """The unwrapped model."""
        return getattr(self.model, "module", self.model)

    def state(self) -> tuple[Mapping[str, object], Mapping[str, object]]:
        """Model and optimizer state, whole (as rank 0 writes it)."""
        return self.module().state_dict(), self.optimizer.state_dict()

    def save(self, directory: Path, meta: CheckpointMeta) -> bool:
        """Write a checkpoint into ``directory``; True when this rank wrote files."""
        model_state, optimizer_state = self.state()
        if self.rank != 0:
            return False
        torch.save(
            {**meta.to_json(), "model": model_state, "optimizer": optimizer_state},
            directory / STATE_FILE,
        )
        return True

    def load(self, directory: Path) -> CheckpointMeta:
        """Restore from a checkpoint directory; returns its metadata."""
        path = directory / STATE_FILE
        saved = torch.load(path, map_location=self.device, weights_only=False)
        self.module().load_state_dict(saved.pop("model"))
        self.optimizer.load_state_dict(saved.pop("optimizer"))
        return CheckpointMeta.from_json(saved, str(path))


class Fsdp2(Strategy):
    """FSDP2 (``fully_shard``) per block and at the root; full state dicts for checkpoints."""

    def wrap(self, model: nn.Module) -> nn.Module:
        """Shard each transformer block, then the whole model.

        A compiled model compiles each block before it is sharded (as torchtitan
        does): the blocks are alike, so they share one compiled graph, and FSDP's
        hooks around them stay eager.
        """
        from torch.distributed.fsdp import fully_shard

        assert isinstance(model, GPT)
        for block in model.blocks:
            if self.compiled:
                compile_in_place(block, self.config.compile_backend)
            fully_shard(block)
        fully_shard(model)
        return model

    def state(self) -> tuple[Mapping[str, object], Mapping[str, object]]:
        """Gather full, CPU-resident state dicts (a collective: every rank calls it)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_state_dict(self.model, self.optimizer, options=options)

    def load(self, directory: Path) -> CheckpointMeta:
        """Every rank reads the full state and keeps its shards."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        path = directory / STATE_FILE
        saved = torch.load(path, map_location="cpu", weights_only=False)
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=saved.pop("model"),
            optim_state_dict=saved.pop("optimizer"),
            options=options,
        )
        return CheckpointMeta.from_json(saved, str(path))


class DeepSpeed(Strategy):
    """DeepSpeed ZeRO (stage from the config, optional CPU offload of the optimizer)."""

    def __init__(self, model: GPT, config: TrainConfig, device: torch.device, rank: int) -> None:
        import deepspeed

        self.config = config
        self.device = device
        self.rank = rank
        self.dtype = None
        self.scaler = None
        zero: JsonObject = {"stage": config.zero_stage}
        if config.offload_optimizer:
            zero["offload_optimizer"] = {"device": "cpu"}
        ds_config: JsonObject = {
            "train_micro_batch_size_per_gpu": config.batch_size,
            "gradient_accumulation_steps": config.gradient_accumulation_steps,
            "zero_optimization": zero,
            "bf16": {"enabled": config.precision == "bf16"},
            "fp16": {"enabled": config.precision == "fp16"},
            "steps_per_print": 10**9,
        }
        model = model.to(device)
        client: torch.optim.Optimizer | None = None
        if config.offload_optimizer:
            # ZeRO-Offload steps on the CPU with DeepSpeed's own CPU Adam, named in the config.
            ds_config["optimizer"] = {
                "type": "AdamW",
                "params": {"lr": config.learning_rate, "weight_decay": config.weight_decay},
            }
        else:
            # torch's AdamW (fused on CUDA), which ZeRO supports as a client optimizer. The
            # config's "AdamW" would be DeepSpeed's FusedAdam, compiled on first use on
            # every fresh machine: a CUDA toolkit (nvcc) on GPU nodes, a minute of C++ on CPU.
            client = torch.optim.AdamW(
                model.parameters(),
                lr=config.learning_rate,
                weight_decay=config.weight_decay,
                fused=device.type == "cuda",
            )
        engine, optimizer, _, _ = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), optimizer=client, config=ds_config
        )
        self.engine: Any = engine
        self.model = engine
        self.optimizer = optimizer
        self.compiled = config.compiles(device.type)
        if self.compiled:
            # DeepSpeed's own way (0.19.8): the engine compiles its module in place
            # (nn.Module.compile) and records that it did.
            engine.compile(backend=config.compile_backend)

    def micro_step(self, x: torch.Tensor, y: torch.Tensor, last: bool) -> torch.Tensor:
        """DeepSpeed's own backward; it scales for accumulation itself."""
        loss = self.engine(to_device(x, self.device), to_device(y, self.device))
        self.engine.backward(loss)
        self.engine.step()
        detached: torch.Tensor = loss.detach()
        return detached

    def optimizer_step(self) -> None:
        """Nothing: DeepSpeed stepped inside ``micro_step`` at the accumulation boundary."""

    def module(self) -> nn.Module:
        """The unwrapped model."""
        module: nn.Module = self.engine.module
        return module

    def save(self, directory: Path, meta: CheckpointMeta) -> bool:
        """Every rank writes its ZeRO shard; rank 0 adds the metadata."""
        self.engine.save_checkpoint(str(directory), tag=DEEPSPEED_TAG)
        if self.rank == 0:
            torch.save(meta.to_json(), directory / STATE_FILE)
        return True

    def load(self, directory: Path) -> CheckpointMeta:
        """Restore engine, optimizer shards and metadata."""
        self.engine.load_checkpoint(str(directory), tag=DEEPSPEED_TAG)
        path = directory / STATE_FILE
        return CheckpointMeta.from_json(
            torch.load(path, map_location="cpu", weights_only=False), str(path)
        )


def make_strategy(
    model: GPT, config: TrainConfig, device: torch.device, rank: int, local_rank: int
) -> Strategy:
    """The strategy ``config.strategy`` names."""
    if config.strategy == "deepspeed":
        # DeepSpeed insists on its launcher's variable even when the group exists.
        os.environ.setdefault("LOCAL_RANK", str(local_rank))
        return DeepSpeed(model, config, device, rank)
    kinds: dict[str, type[Strategy]] = {"ddp": Strategy, "fsdp2": Fsdp2}
    return kinds[config.strategy](model, config, device, rank)
