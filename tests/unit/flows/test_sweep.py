"""``rtk profile``: the steps its dry run prints are the steps the sweep takes.

The dry run goes through rtk's CLI; the sweep runs on a simulated cluster
(``transports_from``: bring-up and teardown are rtk's own code against simulated
nodes), its Ray jobs held by ``jobs_from``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from toolkit.cli import main
from toolkit.cluster.progress_reporter import QuietReporter
from toolkit.flows.stand_ins import jobs_from, transports_from
from toolkit.flows.sweep import run_sweep
from toolkit.flows.sweep_plan import SweepStepKind, plan_sweep
from toolkit.inventory import Inventory
from toolkit.jobs.client import JobOutcome
from toolkit.jobs.request import JobRequest
from toolkit.profile.experiment import load_experiment
from toolkit.simulation import LatencyModel, SimulatedCluster, SimulatedTransport

STEP_LINE = re.compile(r"^(\d+)\. (up|down|run)(?: ([^:]+))?:")


@pytest.fixture
def experiment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RTK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    nodes = [{"host": f"n{i}", "address": f"10.0.0.{i}"} for i in range(1, 4)]
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump({"cluster": "sim", "nodes": nodes}))
    spec = {
        "name": "steps",
        "inventory": "inv.yaml",
        "output_dir": "sweep",
        "workload": {"command": ["true"]},
        "axes": {"nodes": [2, 1], "code": [0, 1]},
        "baseline_s": 0,
        "cooldown_max_s": 0,
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture
def cluster() -> Iterator[SimulatedCluster]:
    simulated = SimulatedCluster(LatencyModel(scale=0.0))

    def factory(_: Inventory) -> SimulatedTransport:
        return SimulatedTransport(simulated)

    with transports_from(factory):
        yield simulated


def printed(capsys: pytest.CaptureFixture[str], *args: str) -> list[tuple[str, str]]:
    main(args=[*args, "--dry-run"])
    lines = capsys.readouterr().out.splitlines()
    found = [(m.group(1), m.group(2), m.group(3) or "") for x in lines if (m := STEP_LINE.match(x))]
    assert [int(n) for n, _, _ in found] == list(range(1, len(found) + 1)), lines
    return [(kind, what) for _, kind, what in found]


def succeeded(request: JobRequest) -> JobOutcome:
    return JobOutcome(request.submission_id, "SUCCEEDED", 0.1)


def test_the_sweep_takes_the_steps_its_dry_run_printed(
    experiment: Path, cluster: SimulatedCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = printed(capsys, "profile", str(experiment))
    # One bring-up per node count, the runs on it, its teardown before the next count.
    assert [kind for kind, _ in steps] == ["up", "run", "run", "down"] * 2
    exp = load_experiment(str(experiment))
    with jobs_from(succeeded):
        outcome = run_sweep(exp, plan_sweep(exp), QuietReporter(), lambda _: None)
    taken = [(s.kind.value, s.run.run_id if s.run else "") for s in outcome.steps]
    assert taken == steps
    assert cluster.running() == set()
    # Runs are kept as they end: the failed ones (no telemetry to report here) are
    # planned again, and --keep-cluster plans no teardown at the end.
    again = printed(capsys, "profile", str(experiment), "--keep-cluster", "--max-runs", "1")
    assert again == steps[:2]


def test_an_interrupted_sweep_still_takes_its_cluster_down(
    experiment: Path, cluster: SimulatedCluster
) -> None:
    exp = load_experiment(str(experiment))
    plan = plan_sweep(exp)
    jobs: list[str] = []

    def second_is_interrupted(request: JobRequest) -> JobOutcome:
        jobs.append(request.submission_id)
        if len(jobs) == 2:
            raise KeyboardInterrupt
        return succeeded(request)

    with jobs_from(second_is_interrupted), pytest.raises(KeyboardInterrupt):
        run_sweep(exp, plan, QuietReporter(), lambda _: None)
    assert len(jobs) == 2 and cluster.running() == set()
    assert plan.steps[-1].kind is SweepStepKind.DOWN
