"""The Ray Train helpers: in this process, then in a real TorchTrainer with two workers."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
import torch
from ray import cloudpickle
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from toolkit.markers import recorder
from toolkit.markers.ray_train import StepMarkers, report
from toolkit.rundir.markers import Marker, read_markers

pytestmark = pytest.mark.ray

WORKERS = 2
STEPS_PER_EPOCH = 3
EPOCHS = 2
SEQ = 8
BATCH = 4


def step_events(markers: list[Marker]) -> list[tuple[str, int | None]]:
    return [(m.event, m.step) for m in markers if m.event.startswith("step_")]


def test_each_batch_is_a_step_numbered_on_across_loops(run_dir: Path) -> None:
    steps = StepMarkers(first_step=10)
    for _epoch in range(2):
        for batch in steps.over([[1, 2], [3, 4, 5]], tokens=len, samples=lambda b: 1):
            steps.loss(float(sum(batch)))
    markers = read_markers(run_dir)

    assert markers[0].event == "run_start" and markers[0].fields == {"steps_from": "ray_train"}
    assert step_events(markers) == [
        (e, n) for n in range(10, 14) for e in ("step_begin", "step_end")
    ]
    ends = [m.fields for m in markers if m.event == "step_end"]
    assert (
        ends
        == [{"tokens": 2, "samples": 1, "loss": 3.0}, {"tokens": 3, "samples": 1, "loss": 12.0}] * 2
    )
    assert steps.next_step == 14


def test_leaving_the_loop_ends_the_step_it_was_in(run_dir: Path) -> None:
    steps = StepMarkers()
    for batch in steps.over(range(5)):
        if batch == 1:
            break
    with pytest.raises(RuntimeError):
        for _batch in steps.over(range(5)):
            raise RuntimeError("boom")
    assert step_events(read_markers(run_dir)) == [
        ("step_begin", 0),
        ("step_end", 0),
        ("step_begin", 1),
        ("step_end", 1),
        ("step_begin", 2),
        ("step_end", 2),
    ]


def test_without_rtk_the_batches_pass_through_and_nothing_is_counted(tmp_path: Path) -> None:
    recorder.reset({})

    def never(batch: int) -> int:
        raise AssertionError("counted with markers off")

    assert list(StepMarkers().over(range(3), tokens=never, samples=never)) == [0, 1, 2]
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def ray_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A local Ray of two CPUs whose processes all get RTK_RUN_DIR, as rtk launch gives it."""
    path = tmp_path_factory.mktemp("ray") / "run"
    ray.init(
        address="local",
        num_cpus=WORKERS,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
        runtime_env={"env_vars": {"RTK_RUN_DIR": str(path)}},
    )
    # The train function travels by value: the workers need not import this test module.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield path
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    ray.shutdown()


def train_loop_per_worker(config: dict[str, Any]) -> None:
    import ray.train.torch

    from toolkit.markers.ray_train import StepMarkers, report

    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(
        torch.nn.Sequential(
            torch.nn.Embedding(32, 8), torch.nn.Flatten(), torch.nn.Linear(8 * SEQ, 1)
        )
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [torch.randint(0, 32, (BATCH, SEQ)) for _ in range(STEPS_PER_EPOCH)]
    steps = StepMarkers()
    for epoch in range(EPOCHS):
        for batch in steps.over(batches, tokens=torch.Tensor.numel, samples=len):
            loss = model(batch).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            steps.loss(loss.item())
        report({"epoch": epoch, "loss": loss.item()})


def test_each_torch_trainer_worker_writes_its_rank_s_steps_and_reports(
    ray_run_dir: Path, tmp_path: Path
) -> None:
    trainer = TorchTrainer(
        train_loop_per_worker,
        scaling_config=ScalingConfig(num_workers=WORKERS, use_gpu=False),
        run_config=RunConfig(name="markers", storage_path=str(tmp_path / "results")),
    )
    # Ray Train's fit() installs a SIGINT handler of its own and leaves it: later tests
    # in this process that expect Ctrl-C to raise KeyboardInterrupt would wait forever.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        trainer.fit()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    markers = read_markers(ray_run_dir)

    assert sorted({(m.rank, m.local_rank, m.world_size) for m in markers}) == [(0, 0, 2), (1, 1, 2)]
    assert len({m.pid for m in markers}) == WORKERS
    for rank in range(WORKERS):
        mine = [m for m in markers if m.rank == rank]
        assert mine[0].event == "run_start" and mine[0].fields == {"steps_from": "ray_train"}
        steps = EPOCHS * STEPS_PER_EPOCH
        assert step_events(mine) == [
            (e, n) for n in range(steps) for e in ("step_begin", "step_end")
        ]
        ends = [m.fields for m in mine if m.event == "step_end"]
        assert [(f["tokens"], f["samples"]) for f in ends] == [(BATCH * SEQ, BATCH)] * steps
        assert all(isinstance(f["loss"], float) for f in ends)
        # report() after each epoch's last step: a phase under that step.
        phases = [(m.event, m.fields["name"], m.step) for m in mine if m.event.startswith("phase")]
        last = [STEPS_PER_EPOCH * (e + 1) - 1 for e in range(EPOCHS)]
        assert phases == [(e, "report", n) for n in last for e in ("phase_begin", "phase_end")]


def test_report_outside_a_worker_raises_ray_s_error_and_closes_its_phase(run_dir: Path) -> None:
    # The phase closes however the report ends.
    with pytest.raises(RuntimeError, match="outside of a Ray Train training function"):
        report({"loss": 1.0})
    phases = [
        (m.event, m.fields.get("name"))
        for m in read_markers(run_dir)
        if m.event.startswith("phase")
    ]
    assert phases == [("phase_begin", "report"), ("phase_end", "report")]
