"""summary.json's ``run`` section (``RunSummary``): written by the report, read by the sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.errors import RunDirError
from toolkit.rundir import RunSummary, read_run_summary
from toolkit.telemetry.report import build_report, write_report

FIGURES = RunSummary(
    duration_s=100.0,
    energy_j=36_000.0,
    steps=10,
    tokens=4096,
    energy_per_step_j=3600.0,
    energy_per_token_j=36_000.0 / 4096,
    tokens_per_s=40.96,
    tokens_per_j=4096 / 36_000.0,
    partial=False,
    restarts=1,
    ranks=2,
    compile_s=31.5,
)
# The keys as summary.json has always had them, in this order.
KEYS = [
    "duration_s",
    "energy_j",
    "energy_wh",
    "steps",
    "tokens",
    "energy_per_step_j",
    "energy_per_token_j",
    "tokens_per_s",
    "tokens_per_j",
    "partial",
    "restarts",
    "ranks",
    "compile_s",
]


def test_run_summary_round_trips_with_its_keys_in_order() -> None:
    as_json = json.loads(json.dumps(FIGURES.to_json()))
    assert list(as_json) == KEYS
    assert as_json["energy_wh"] == 10.0
    assert RunSummary.from_json(as_json) == FIGURES


def test_figures_not_in_the_report_read_as_none() -> None:
    bare = {"partial": True, "restarts": 0, "ranks": 0, "energy_j": None}
    summary = RunSummary.from_json(bare)
    assert summary == RunSummary(None, None, None, None, None, None, None, None, True, 0, 0)
    assert summary.energy_wh is None
    assert summary.to_json()["energy_wh"] is None


def write_summary(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("data", "wrong"),
    [
        ({"v": 1, "run": {**FIGURES.to_json(), "steps": 1.5}}, "run: steps: expected an integer"),
        ({"v": 1, "run": {**FIGURES.to_json(), "partial": "no"}}, "run: partial: expected true"),
        ({"v": 1, "run": {**FIGURES.to_json(), "tokens_per_s": "x"}}, "run: tokens_per_s"),
        ({"v": 1, "nodes": {}}, "run: expected an object, got None"),
        ({"v": 2, "run": FIGURES.to_json()}, "v: expected version 1"),
    ],
)
def test_a_malformed_summary_names_the_file_and_the_field(
    tmp_path: Path, data: object, wrong: str
) -> None:
    path = write_summary(tmp_path, data)
    with pytest.raises(RunDirError) as caught:
        read_run_summary(path)
    assert str(path) in str(caught.value)
    assert wrong in str(caught.value)


def test_what_the_report_writes_is_what_the_sweep_reads(tmp_path: Path) -> None:
    fixture = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1", gpus=1)], steps=6))
    report = build_report(fixture.run_dir)
    files = write_report(report)
    written = json.loads(files.summary_json.read_text())["run"]
    assert list(written) == KEYS
    read = read_run_summary(files.summary_json)
    assert read.to_json() == written
    assert read.energy_j == pytest.approx(report.run.energy_j)
    assert read.steps == report.run.steps == 6
    assert (read.ranks, read.restarts, read.partial) == (
        report.run.ranks,
        report.run.restarts,
        report.run.partial,
    )
