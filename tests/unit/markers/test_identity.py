"""Rank discovery from what the process has (torch.distributed, torchrun's variables, Ray
Train), never importing torch or ray; the GPU's UUID only when CUDA is up."""

from __future__ import annotations

import subprocess
import sys
import types
import uuid

import pytest
import torch
import torch.distributed as dist
from marker_ranks import free_port, python_env

from toolkit.markers.identity import Identity, discover, gpu_uuid, nvml_style_uuid


def test_torchruns_variables_give_rank_local_rank_and_world_size() -> None:
    found = discover({"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8"})
    assert found == Identity(5, 1, 8, None, "env")


def test_nothing_known_is_rank_0_of_1() -> None:
    assert discover({}) == Identity(0, 0, 1, None, "default")
    assert discover({"RANK": "not a number", "LOCAL_RANK": ""}).source == "default"


def test_an_initialised_process_group_comes_first() -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    try:
        found = discover({"RANK": "7", "LOCAL_RANK": "3", "WORLD_SIZE": "9"})
    finally:
        dist.destroy_process_group()
    assert found == Identity(0, 3, 1, None, "torch.distributed")  # LOCAL_RANK still read


class _TrainContext:
    def __init__(self, rank: int | None, local_rank: int | None, size: int | None) -> None:
        self.answers = rank, local_rank, size

    def get_world_rank(self) -> int | None:
        return self.answers[0]

    def get_local_rank(self) -> int | None:
        return self.answers[1]

    def get_world_size(self) -> int | None:
        return self.answers[2]


def _ray_train(context: _TrainContext) -> types.ModuleType:
    """A module with ray.train's one function that discovery calls, get_context()."""
    module = types.ModuleType("ray.train")
    module.get_context = lambda: context  # type: ignore[attr-defined]
    return module


def test_ray_trains_context_when_ray_train_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray.train", _ray_train(_TrainContext(6, 2, 12)))
    assert discover({}) == Identity(6, 2, 12, None, "ray.train")
    # torchrun's variables come first; Ray still gives the local rank they lack.
    assert discover({"RANK": "1", "WORLD_SIZE": "2"}) == Identity(1, 2, 2, None, "env")


def test_ray_outside_a_training_worker_is_not_a_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray.train", _ray_train(_TrainContext(None, None, None)))
    assert discover({}) == Identity(0, 0, 1, None, "default")


def test_real_ray_train_outside_a_worker_and_no_imports_of_torch_or_ray() -> None:
    script = (
        "import sys\n"
        "from toolkit.markers.identity import discover\n"
        "print(discover({}).source, 'torch' in sys.modules, 'ray' in sys.modules)\n"
        "import ray.train\n"
        "print(discover({}).source)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=python_env(None),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["default False False", "default"]


def test_no_gpu_uuid_while_cuda_is_not_initialised() -> None:
    assert not torch.cuda.is_initialized()
    assert gpu_uuid() is None
    assert not torch.cuda.is_initialized()  # asking did not initialise it


def test_uuids_are_written_as_nvml_writes_them() -> None:
    raw = uuid.UUID("3f1c9a2e-7b4d-4e8a-9c1f-0a2b3c4d5e6f")
    expected = "GPU-3f1c9a2e-7b4d-4e8a-9c1f-0a2b3c4d5e6f"
    assert nvml_style_uuid(raw) == expected  # an object with 16 bytes, as torch gives
    assert nvml_style_uuid(str(raw)) == expected
    assert nvml_style_uuid(expected) == expected
    assert nvml_style_uuid("MIG-1234") == "MIG-1234"
