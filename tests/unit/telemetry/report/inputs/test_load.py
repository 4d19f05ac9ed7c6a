"""inputs/load.py: a run directory without telemetry or samples is a clear ReportError.

Synthetic, format-exact run directories (tests/telemetry_fixtures.py); expected figures
are computed from the samples the fixture wrote, never typed in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.cli.cmd_report import report_cmd
from toolkit.telemetry.report import ReportError, build_report


def test_run_without_telemetry_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "markers").mkdir()
    with pytest.raises(ReportError, match=r"no telemetry/manifest\.json.*--telemetry"):
        build_report(tmp_path)
    result = CliRunner().invoke(report_cmd, [str(tmp_path)])
    assert result.exit_code != 0 and isinstance(result.exception, ReportError)
    with pytest.raises(ReportError, match="no such run directory"):
        build_report(tmp_path / "nope")


def test_run_without_samples_is_a_clear_error(tmp_path: Path) -> None:
    fixture = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1", gpus=1)]))
    for path in (fixture.run_dir / "telemetry" / "nodes").glob("*/trace-*.arrows"):
        path.write_bytes(b"")
    with pytest.raises(ReportError, match="no telemetry samples"):
        build_report(fixture.run_dir)
