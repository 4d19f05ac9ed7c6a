"""A sweep's plan: one bring-up per node count, runs finished earlier left out (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from toolkit.errors import ExperimentError
from toolkit.flows.sweep_plan import SweepStepKind, plan_sweep, run_dir_of
from toolkit.profile.experiment import Experiment, load_experiment
from toolkit.rundir import ProfileRunRecord, RunDir


def _experiment(tmp_path: Path, nodes: list[int], power: list[int] | None = None) -> Experiment:
    hosts = [{"host": f"n{i}", "address": f"10.0.0.{i}"} for i in range(1, 4)]
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump({"cluster": "p", "nodes": hosts}))
    axes: dict[str, list[int]] = {"nodes": nodes}
    if power:
        axes["power_limit_w"] = power
    spec = {
        "name": "plan",
        "inventory": str(tmp_path / "inv.yaml"),
        "output_dir": str(tmp_path / "sweep"),
        "workload": {"command": ["true"]},
        "axes": axes,
    }
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(spec))
    return load_experiment(str(tmp_path / "sweep.yaml"))


def _kinds(exp: Experiment, **options: object) -> list[tuple[str, int]]:
    plan = plan_sweep(exp, **options)  # type: ignore[arg-type]
    return [(s.kind.value, s.nodes) for s in plan.steps]


def test_runs_group_by_node_count_each_count_up_once_and_down_after(tmp_path: Path) -> None:
    exp = _experiment(tmp_path, [1, 3], power=[200, 300])
    assert _kinds(exp) == [
        *[("up", 1), ("run", 1), ("run", 1), ("down", 1)],
        *[("up", 3), ("run", 3), ("run", 3), ("down", 3)],
    ]
    assert _kinds(exp, keep_cluster=True)[-1] == ("run", 3)
    assert _kinds(exp, max_runs=1) == [("up", 1), ("run", 1), ("down", 1)]
    text = plan_sweep(exp).render()
    assert "1. up: the cluster on 1 node(s) (n1), no checks" in text
    assert "power_limit_w=200, put back after the run" in text


def test_a_run_finished_earlier_is_skipped_and_named(tmp_path: Path) -> None:
    exp = _experiment(tmp_path, [1, 2])
    first = next(iter(exp.runs()))
    run_dir = run_dir_of(exp, first)
    run_dir.mkdir(parents=True)
    layout = RunDir(run_dir)
    ProfileRunRecord(first.run_id, first.config_id, {}, 0, "succeeded").write(layout.profile_run)
    plan = plan_sweep(exp)
    assert plan.skipped == (first.run_id,)
    assert [s.kind for s in plan.steps] == [SweepStepKind.UP, SweepStepKind.RUN, SweepStepKind.DOWN]
    assert plan.steps[0].nodes == 2
    assert "1 run(s) to do, 1 finished earlier and skipped" in plan.render()


def test_more_nodes_than_the_inventory_has_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    with pytest.raises(ExperimentError, match="the sweep asks for 5 nodes"):
        plan_sweep(_experiment(tmp_path, [5]))
