"""The load job's options: written by the host as the job's argument, read by the job."""

from __future__ import annotations

import json

import pytest

from toolkit.errors import RunDirError
from toolkit.preflight.load.job_options import LoadJobOptions


def test_the_options_round_trip_and_sizes_not_given_are_left_out() -> None:
    plain = LoadJobOptions(("n1", "n2"), "bf16", 2.0)
    assert plain.to_json() == {"nodes": ["n1", "n2"], "precision": "bf16", "duration_s": 2.0}
    assert LoadJobOptions.from_json(plain.to_json()) == plain
    sized = LoadJobOptions(("n1",), "fp32", 1.0, gpu_sizes_bytes=(1 << 20,), cpu_sizes_bytes=())
    written = json.loads(json.dumps(sized.to_json()))
    assert written["gpu_sizes_bytes"] == [1 << 20] and written["cpu_sizes_bytes"] == []
    assert LoadJobOptions.from_json(written) == sized


@pytest.mark.parametrize(
    ("change", "wrong"),
    [
        ({"precision": None}, "precision: expected text, got None"),
        ({"duration_s": "2"}, "duration_s: expected a number"),
        ({"gpu_sizes_bytes": [True]}, "gpu_sizes_bytes: expected a list of integers"),
    ],
)
def test_malformed_options_name_the_field(change: dict[str, object], wrong: str) -> None:
    good = LoadJobOptions(("n1",), "bf16", 2.0).to_json()
    with pytest.raises(RunDirError) as caught:
        LoadJobOptions.from_json({**good, **change})
    assert str(caught.value).startswith("load job options: ")
    assert wrong in str(caught.value)
