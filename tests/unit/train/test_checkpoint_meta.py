"""A checkpoint's metadata: saved beside the state, read back to resume at the next step."""

from __future__ import annotations

import pytest

from toolkit.errors import RunDirError
from toolkit.train.checkpoint_meta import CheckpointMeta

META = CheckpointMeta(step=20, next_step=21, seed=3, world_size=2, strategy="fsdp2")


def test_the_metadata_is_saved_under_the_keys_resumes_have_always_read() -> None:
    assert META.to_json() == {
        "step": 20,
        "next_step": 21,
        "seed": 3,
        "world_size": 2,
        "strategy": "fsdp2",
    }
    assert CheckpointMeta.from_json(META.to_json()) == META


def test_the_state_saved_beside_it_is_left_out() -> None:
    saved = {**META.to_json(), "model": {"w": [1.0]}, "optimizer": {"state": {}}}
    assert CheckpointMeta.from_json(saved) == META


def test_a_missing_or_wrong_field_names_the_file_and_the_field() -> None:
    with pytest.raises(RunDirError, match=r"ckpt/state\.pt: step: expected an integer, got '20'"):
        CheckpointMeta.from_json({**META.to_json(), "step": "20"}, "ckpt/state.pt")
    with pytest.raises(RunDirError, match="strategy: expected text, got None"):
        CheckpointMeta.from_json({"step": 1, "next_step": 2, "seed": 0, "world_size": 1})
