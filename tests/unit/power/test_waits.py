"""Each rank's wait for the last one, from its node's values, and its GPU."""

from __future__ import annotations

import pytest

from toolkit.power.waits import gpu_of, window_waits
from toolkit.stall.slow import RankSteps


def test_waits_are_each_ranks_value_less_the_least_averaged_over_the_window() -> None:
    ranks = [
        RankSteps(0, "a", barrier_steps=(1, 2, 3), barrier_wait_s=(0.5, 0.7, 9.0)),
        RankSteps(1, "b", barrier_steps=(1, 2, 3), barrier_wait_s=(0.1, 0.1, 0.0)),
    ]
    assert window_waits(ranks, 1, 2) == pytest.approx({0: 0.5, 1: 0.0})
    assert window_waits(ranks, 5, 9) == {}  # no step there
    assert window_waits(ranks[:1], 1, 2) == {}  # one rank waits for nobody


def test_a_step_without_every_ranks_barrier_is_judged_by_backward() -> None:
    ranks = [
        RankSteps(0, "a", barrier_steps=(1,), barrier_wait_s=(0.2,),
                  backward_steps=(1, 2), backward_s=(1.0, 1.4)),
        RankSteps(1, "b", backward_steps=(1, 2), backward_s=(0.5, 0.4)),
    ]  # fmt: skip
    assert window_waits(ranks, 1, 2) == pytest.approx({0: 0.75, 1: 0.0})


def test_a_ranks_gpu_is_found_by_uuid_else_by_local_rank() -> None:
    gpus = {0: "GPU-a", 1: "GPU-b"}
    assert gpu_of(0, "GPU-b", gpus) == 1
    assert gpu_of(1, None, gpus) == 1
    assert gpu_of(1, "GPU-elsewhere", gpus) == 1
    assert gpu_of(5, None, gpus) is None
