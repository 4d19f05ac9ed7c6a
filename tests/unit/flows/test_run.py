"""The plan is what runs: every run command, printed with --dry-run and then run.

Each command runs through rtk's CLI twice: once with ``--dry-run``, whose numbered
steps are read back from what it printed, and once for real on a simulated cluster
(``transports_from``: bring-up, status, preflight, the smoke task, collect and
teardown are rtk's own code against simulated nodes), with the Ray job itself held by
``jobs_from``. ``observe_runs`` hands over the plan that ran and the steps that ran;
both must be the printed steps, in order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from toolkit.cli import main
from toolkit.errors import JobError
from toolkit.flows.run import RunResult, observe_runs
from toolkit.flows.run_plan import RunPlan, Step
from toolkit.flows.stand_ins import jobs_from, transports_from
from toolkit.inventory import Inventory
from toolkit.jobs.client import JobOutcome
from toolkit.jobs.request import JobRequest
from toolkit.simulation import LatencyModel, SimulatedCluster, SimulatedTransport

STEP_LINE = re.compile(r"^(\d+)\. (\w+)[: ]")


@pytest.fixture
def cluster_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RTK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "inv.yaml"
    nodes = [{"host": f"n{i}", "address": f"10.0.0.{i}"} for i in range(1, 4)]
    path.write_text(yaml.safe_dump({"cluster": "sim", "nodes": nodes}))
    return path


class Observed:
    """The runs a command made, and the jobs it submitted."""

    def __init__(self) -> None:
        self.runs: list[tuple[RunPlan, RunResult]] = []
        self.jobs: list[JobRequest] = []

    def job(self, request: JobRequest) -> JobOutcome:
        self.jobs.append(request)
        return JobOutcome(request.submission_id, "SUCCEEDED", 0.1)


@pytest.fixture
def simulated() -> Iterator[Observed]:
    cluster = SimulatedCluster(LatencyModel(scale=0.0))
    seen = Observed()

    def factory(_: Inventory) -> SimulatedTransport:
        return SimulatedTransport(cluster)

    with (
        transports_from(factory),
        jobs_from(seen.job),
        observe_runs(lambda plan, result: seen.runs.append((plan, result))),
    ):
        yield seen


def with_options(args: list[str], *options: str) -> list[str]:
    """``options`` before a ``--`` (what follows it is the user's command)."""
    cut = args.index("--") if "--" in args else len(args)
    return [*args[:cut], *options, *args[cut:]]


def printed_steps(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    main(args=with_options(list(args), "--dry-run"))
    out = capsys.readouterr().out
    steps = [m.group(2) for line in out.splitlines() if (m := STEP_LINE.match(line))]
    assert [int(m.group(1)) for line in out.splitlines() if (m := STEP_LINE.match(line))] == list(
        range(1, len(steps) + 1)
    ), out
    return steps


def ran_steps(seen: Observed, *args: str) -> tuple[RunPlan, RunResult]:
    before = len(seen.runs)
    try:
        main(args=list(args))
    except SystemExit as e:  # a failed step still ends the run: its steps are kept
        assert e.code in (0, 1, None), e
    assert len(seen.runs) == before + 1, "the command ran no plan"
    return seen.runs[-1]


COMMANDS = {
    "train": ["train", "INV", "--max-steps", "3", "--no-telemetry"],
    "train, telemetry": ["train", "INV", "--max-steps", "3"],
    "train --up": ["train", "INV", "--up", "--no-preflight", "--max-steps", "3"],
    "train, no preflight": ["train", "INV", "--no-preflight", "--max-steps", "3"],
    "telemetry record": ["telemetry", "record", "INV", "--", "sleep", "1"],
    "demo": ["demo", "--max-steps", "3"],
    "demo --keep": ["demo", "--max-steps", "3", "--keep"],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_what_runs_is_what_the_dry_run_printed(
    name: str, cluster_file: Path, simulated: Observed, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [str(cluster_file) if a == "INV" else a for a in COMMANDS[name]]
    args = with_options(args, "--output-dir", "runs")
    if args[0] != "demo" and "--up" not in args:  # the others run on a cluster that is up
        main(args=["up", str(cluster_file), "--no-preflight"])
    printed = printed_steps(capsys, *args)
    plan, result = ran_steps(simulated, *args)
    assert [s.value for s in plan.steps] == printed
    assert [s.value for s in result.ran] == printed, capsys.readouterr()
    assert len(simulated.jobs) == 1 and simulated.jobs[0].submission_id == plan.job.submission_id
    if plan.preflight_file is not None:  # kept where the plan said
        assert result.preflight is not None
        assert result.preflight.saved_to == plan.preflight_file
    main(args=["down", str(cluster_file)])


def test_a_failed_step_ends_the_run_but_the_planned_teardown_still_runs(
    cluster_file: Path, simulated: Observed, capsys: pytest.CaptureFixture[str]
) -> None:
    def refused(request: JobRequest) -> JobOutcome:
        raise JobError(f"{request.submission_id}: the Jobs API refused it")

    with jobs_from(refused), pytest.raises(SystemExit) as ended:
        main(args=["demo", "--max-steps", "3", "--output-dir", "runs"])
    assert ended.value.code == JobError.exit_code
    assert "the Jobs API refused it" in capsys.readouterr().err
    plan, result = simulated.runs[-1]
    assert Step.JOB not in result.ran and result.ran[-1] is Step.DOWN
    assert result.ran == [s for s in plan.steps if s not in (Step.JOB, Step.COLLECT, Step.REPORT)]
