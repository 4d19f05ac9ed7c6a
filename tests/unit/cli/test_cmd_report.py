"""``rtk report RUN_DIR/report`` reports the run, as ``rtk report RUN_DIR`` does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from telemetry_fixtures import BuiltRun, NodeSpec, RunSpec, build_run

from toolkit.cli.cmd_report import report_cmd
from toolkit.rundir import RunDir
from toolkit.telemetry.report import ReportError


@pytest.fixture
def run(tmp_path: Path) -> BuiltRun:
    return build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1", gpus=1)], steps=10))


def _report(*args: str) -> str:
    result = CliRunner().invoke(report_cmd, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_the_report_folder_reports_its_run_as_the_run_dir_does(run: BuiltRun) -> None:
    report = run.run_dir / "report"
    by_run = _report(str(run.run_dir))
    by_folder = _report(str(report))
    assert by_folder == by_run
    assert f"report: {report / 'report.html'}" in by_folder
    assert not (report / "report").exists()  # rebuilt in place, not one level deeper
    summary = json.loads(_report(str(report), "--json"))
    assert summary["run"]["steps"] == 10


def test_the_report_folder_works_before_any_report_was_written(run: BuiltRun) -> None:
    report = run.run_dir / "report"
    shutil.rmtree(report, ignore_errors=True)
    _report(f"{report}/")
    assert (report / "summary.json").is_file()


def test_dot_inside_the_report_folder(run: BuiltRun, monkeypatch: pytest.MonkeyPatch) -> None:
    _report(str(run.run_dir))
    monkeypatch.chdir(run.run_dir / "report")
    assert RunDir.find(Path(".")).root == (run.run_dir).resolve()
    assert "node1" in _report(".")


def test_a_run_directory_named_report_is_its_own_run(tmp_path: Path) -> None:
    fixture = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1", gpus=1)]), name="report")
    assert fixture.run_dir.name == "report"
    assert RunDir.find(fixture.run_dir).root == fixture.run_dir


def test_a_report_folder_outside_any_run_is_still_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "report").mkdir()
    assert RunDir.find(tmp_path / "report").root == tmp_path / "report"
    result = CliRunner().invoke(report_cmd, [str(tmp_path / "report")])
    assert isinstance(result.exception, ReportError)
    assert "no telemetry/manifest.json" in str(result.exception)
