"""The Ray Train helpers, in this process. In a real TorchTrainer, one worker per node:
tests/integration/test_torchrun_cluster.py (its framework-callback scenario)."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.markers import recorder
from toolkit.markers.ray_train import StepMarkers, report
from toolkit.rundir.markers import Marker, read_markers


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
