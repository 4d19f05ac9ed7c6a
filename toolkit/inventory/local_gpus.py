"""This machine's GPUs, for the embedded one-node inventory (``rtk ... --local``).

An inventory states the GPUs each node should have (``gpus:``), and preflight holds the
node to it. The embedded inventory describes whatever machine rtk runs on, so it states
what NVML counts here (as many as ``CUDA_VISIBLE_DEVICES`` leaves visible, as Ray
counts them); without a driver or NVML, none. Before this, it stated none everywhere,
and ``rtk up --local`` failed its preflight on the first GPU machine it met.
"""

from __future__ import annotations

import contextlib
import os


def local_gpu_count() -> int:
    """NVIDIA GPUs NVML sees on this machine, as many as CUDA_VISIBLE_DEVICES leaves."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library, no driver, no device: no GPU
        return 0
    try:
        count = int(pynvml.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001
        count = 0
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return count
    listed = [d for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    return min(count, len(listed))
