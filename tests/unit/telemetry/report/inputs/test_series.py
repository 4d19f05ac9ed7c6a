"""inputs/series.py: runs recorded as JSON lines read into the same figures as Arrow.

Synthetic, format-exact run directories (tests/telemetry_fixtures.py); expected figures
are computed from the samples the fixture wrote, never typed in.
"""

from __future__ import annotations

from pathlib import Path

from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.telemetry.report import build_report, summary_dict


def test_legacy_json_lines_runs_report_the_same_figures(tmp_path: Path) -> None:
    """A run recorded before traces were Arrow reads into exactly the same figures."""
    nodes = [NodeSpec("node1", gpus=2, throttle=[(2.0, 4.0, 0x4)]), NodeSpec("node2", offset_s=3)]
    reports = {}
    for trace_format in ("arrow", "jsonl"):
        fixture = build_run(
            tmp_path / trace_format, RunSpec(nodes=nodes, trace_format=trace_format)
        )
        reports[trace_format] = summary_dict(build_report(fixture.run_dir))
        reports[trace_format].pop("run_dir")
    assert reports["arrow"] == reports["jsonl"]
