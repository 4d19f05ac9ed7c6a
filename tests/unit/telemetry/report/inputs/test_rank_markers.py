"""inputs/rank_markers.py: a rank file Arrow cannot read is read line by line.

Synthetic, format-exact run directories (tests/telemetry_fixtures.py); expected figures
are computed from the samples the fixture wrote, never typed in.
"""

from __future__ import annotations

from pathlib import Path

from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.telemetry.report import build_report


def test_a_marker_file_with_text_that_is_no_utf8_is_read_line_by_line(tmp_path: Path) -> None:
    # Found by the property tests: Arrow's JSON reader kept the bad bytes and failed
    # with UnicodeDecodeError only when the GPU ids were read out.
    built = build_run(tmp_path, RunSpec(nodes=[NodeSpec("n1"), NodeSpec("n2")], steps=4))
    path = built.run_dir / "markers" / "rank-00000.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"gpu_uuid": "GPU-', b'"gpu_uuid": "\x80PU-', 1))
    report = build_report(built.run_dir)
    assert report.run.steps == 4
