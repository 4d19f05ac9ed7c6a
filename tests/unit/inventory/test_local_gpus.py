"""The embedded inventory (``--local``) states this machine's GPUs, as NVML counts them.

The first GPU machine failed ``rtk up --local``'s preflight with "gpu.count: 1 GPU(s)
(want 0 (the inventory's gpus))": the embedded inventory said nothing of GPUs, which
an inventory reads as none. NVML is faked here (``fake_nvml``), as nowhere else.
"""

from __future__ import annotations

import sys

import pytest
from fake_nvml import FakeGpu, FakeNvml

from toolkit.inventory import default_inventory
from toolkit.inventory.local_gpus import local_gpu_count


def fake(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    gpus = [FakeGpu(uuid=f"GPU-{i:08x}-5d1c-c2cb-6a5e-1a2b3c4d5e6f") for i in range(count)]
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpus))


def test_the_local_node_expects_the_gpus_nvml_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake(monkeypatch, 2)
    assert local_gpu_count() == 2
    assert default_inventory().nodes[0].gpus == 2
    assert default_inventory(gpus=0).nodes[0].gpus == 0  # said outright, it wins


def test_cuda_visible_devices_narrows_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    fake(monkeypatch, 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    assert local_gpu_count() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert local_gpu_count() == 0


def test_without_nvml_the_local_node_expects_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises
    assert local_gpu_count() == 0
    assert default_inventory().nodes[0].gpus == 0
