"""rtk telemetry record's command, as the driver's workload (real processes). How the
runtime watches and stops it: tests/unit/jobdriver/test_runtime.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from toolkit.telemetry.record_job import CommandRun


def test_the_command_runs_with_the_run_dir_and_its_status_is_the_jobs(tmp_path: Path) -> None:
    script = "import os, sys; open(os.environ['RTK_RUN_DIR'] + '/seen', 'w'); sys.exit(4)"
    command = CommandRun([sys.executable, "-c", script], tmp_path)
    assert command.run() == 4
    assert (tmp_path / "seen").exists() and command.duration_s > 0


@pytest.mark.parametrize(("argv", "code"), [(["no-such-program-rtk"], 127), (["/dev/null"], 126)])
def test_a_command_that_cannot_start_has_the_shells_status_and_one_line(
    tmp_path: Path, argv: list[str], code: int, capfd: pytest.CaptureFixture[str]
) -> None:
    assert CommandRun(argv, tmp_path).run() == code
    assert f"rtk telemetry: cannot run {argv[0]!r}" in capfd.readouterr().out
