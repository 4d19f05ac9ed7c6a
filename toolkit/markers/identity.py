"""Who this process is: its rank, its rank on the node, how many ranks, and its GPU.

Found from what the process already has, in this order:

1. ``torch.distributed`` when it is imported and its default group is initialised
   (``get_rank``, ``get_world_size``);
2. ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``, which torchrun sets for each worker;
3. Ray Train's context when ``ray.train`` is already imported (``get_context()``: world
   rank, local rank, world size), as in a ``train_loop_per_worker``;
4. else rank 0 of 1.

The local rank comes from ``LOCAL_RANK`` when it is set, else from Ray Train's
context, else 0. Nothing here imports torch or ray: a process that has not imported
them is not using them, and importing them to find out would cost seconds. The GPU's
UUID is read only when torch is imported and CUDA is already initialised (asking
sooner would initialise CUDA in a process that may never use it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Identity:
    """Who writes a marker stream.

    Attributes:
        rank: The global rank (names the stream's file).
        local_rank: The rank on this node.
        world_size: How many ranks the job has.
        gpu_uuid: The process's current CUDA device, NVML-style (``GPU-...``), or None.
        source: Where the rank came from: ``torch.distributed``, ``env``,
            ``ray.train`` or ``default``.
    """

    rank: int
    local_rank: int
    world_size: int
    gpu_uuid: str | None
    source: str


def discover(environ: Mapping[str, str] = os.environ) -> Identity:
    """This process's identity now, from the sources in the module's order."""
    ray_ranks = _ray_train_ranks()
    env_local = _int_or_none(environ.get("LOCAL_RANK"))
    local_rank = env_local if env_local is not None else (ray_ranks[1] if ray_ranks else 0)
    gpu = gpu_uuid()
    dist_ranks = _torch_distributed_ranks()
    if dist_ranks is not None:
        return Identity(dist_ranks[0], local_rank, dist_ranks[1], gpu, "torch.distributed")
    env_rank = _int_or_none(environ.get("RANK"))
    if env_rank is not None:
        world_size = _int_or_none(environ.get("WORLD_SIZE")) or env_rank + 1
        return Identity(env_rank, local_rank, world_size, gpu, "env")
    if ray_ranks is not None:
        return Identity(ray_ranks[0], ray_ranks[1], ray_ranks[2], gpu, "ray.train")
    return Identity(0, local_rank, 1, gpu, "default")


def gpu_uuid() -> str | None:
    """The current CUDA device's UUID, when torch has already initialised CUDA; else None."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is None:
        return None
    try:
        if not cuda.is_initialized():
            return None
        return nvml_style_uuid(cuda.get_device_properties(cuda.current_device()).uuid)
    except Exception:  # a device we cannot ask has no UUID to record
        return None


def nvml_style_uuid(raw: object) -> str:
    """A device UUID as NVML writes it: ``GPU-`` and the dashed hex (torch omits the prefix).

    ``raw`` is what ``torch.cuda.get_device_properties(d).uuid`` gives (an object
    whose ``bytes`` are the 16 bytes, printing as the dashed hex), a ``uuid.UUID``, or
    text with or without the prefix.
    """
    raw_bytes = getattr(raw, "bytes", None)
    if isinstance(raw_bytes, bytes) and len(raw_bytes) == 16:
        import uuid

        text = str(uuid.UUID(bytes=raw_bytes))
    else:
        text = str(raw)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _torch_distributed_ranks() -> tuple[int, int] | None:
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a half-torn-down group: fall through to the others
        return None


def _ray_train_ranks() -> tuple[int, int, int] | None:
    """(world rank, local rank, world size) from Ray Train, when it is imported and answers."""
    train: ModuleType | None = sys.modules.get("ray.train")
    if train is None:
        return None
    try:
        context = train.get_context()
        ranks = (context.get_world_rank(), context.get_local_rank(), context.get_world_size())
    except Exception:  # outside a training worker Ray may refuse
        return None
    if not all(isinstance(n, int) for n in ranks):
        return None  # outside a worker Ray answers None
    return ranks[0], ranks[1], ranks[2]


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None and text.strip() else None
    except ValueError:
        return None
