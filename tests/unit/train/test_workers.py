"""The training job's worker group: how many workers, with what, and when it cannot fit."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolkit.train.config import TrainConfig
from toolkit.train.workers import WorkerLayout, placement_problem, worker_layout

TWO_NODES_TWO_GPUS = {"CPU": 32.0, "GPU": 4.0, "memory": 1e11}
THREE_CPU_NODES = {"CPU": 6.0, "memory": 3e9}


def layout(totals: dict[str, float], nodes: int, **options: Any) -> WorkerLayout:
    return worker_layout(TrainConfig(run_dir="r", **options), totals, nodes)


def test_the_seed_guides_num_workers_0_is_one_worker_per_gpu() -> None:
    # The guide's "2 nodes, 2 GPUs each (4 total GPUs)": --num_workers 0 with
    # --resources_per_worker '{"GPU": 1, "CPU": 4}' trains on every GPU.
    got = layout(TWO_NODES_TWO_GPUS, 2, resources_per_worker={"GPU": 1.0, "CPU": 4.0})
    assert got == WorkerLayout(
        num_workers=4,
        resources_per_worker={"GPU": 1.0, "CPU": 4.0},
        use_gpu=True,
        placement_strategy="SPREAD",
    )
    assert placement_problem(got, TWO_NODES_TWO_GPUS) is None


def test_the_layout_is_recorded_under_the_keys_train_config_json_has() -> None:
    got = layout(THREE_CPU_NODES, 3, resources_per_worker={"CPU": 1.0})
    assert json.dumps(got.to_json()) == (
        '{"num_workers": 3, "resources_per_worker": {"CPU": 1.0}, "use_gpu": false, '
        '"placement_strategy": "STRICT_SPREAD"}'
    )


def test_restart_excluding_makes_the_group_elastic_down_to_min_nodes() -> None:
    got = layout(THREE_CPU_NODES, 3, resources_per_worker={"CPU": 1.0}, min_nodes=2)
    assert got.min_workers == 2 and got.scaling_workers == (2, 3)
    assert got.to_json()["min_workers"] == 2
    # One worker a node, counted by the resource each node has one of.
    assert got.resources_per_worker == {"CPU": 1.0, "rtk_node": 1.0}
    every = layout(THREE_CPU_NODES, 3, resources_per_worker={"CPU": 1.0}, min_nodes=3)
    assert every.min_workers is None and every.scaling_workers == 3


def test_num_workers_0_on_cpu_nodes_is_one_worker_per_node() -> None:
    got = layout(THREE_CPU_NODES, 3, resources_per_worker={"CPU": 1.0})
    assert (got.num_workers, got.use_gpu, got.placement_strategy) == (
        3,
        False,
        "STRICT_SPREAD",
    )
    assert placement_problem(got, THREE_CPU_NODES) is None
    two_gpus = layout(TWO_NODES_TWO_GPUS, 2, num_workers=0, resources_per_worker={"GPU": 2.0})
    assert two_gpus.num_workers == 2


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (
            {"resources_per_worker": {"GPU": 1.0, "CPU": 4.0}},
            "1 worker(s) x {'GPU': 1} need 1 GPU in all; the cluster has 0.",
        ),
        (
            {"num_workers": 3, "resources_per_worker": {"CPU": 4.0}},
            "3 worker(s) x {'CPU': 4} need 12 CPU in all; the cluster has 6.",
        ),
    ],
)
def test_workers_the_cluster_cannot_hold_are_refused_at_once(
    options: dict[str, Any], said: str
) -> None:
    got = layout(THREE_CPU_NODES, 3, **options)
    problem = placement_problem(got, THREE_CPU_NODES)
    assert problem is not None and problem.startswith(said)
    assert "Change --resources-per-worker or --num-workers" in problem
