"""inputs/rank_markers.py: a rank file Arrow cannot read is read line by line, to the same
records; phases, the user's own events and run_start's steps_from are read too.

Synthetic, format-exact run directories (tests/telemetry_fixtures.py); expected figures
are computed from the samples the fixture wrote, never typed in.
"""

from __future__ import annotations

import json
from pathlib import Path

from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.telemetry.report import build_report, summary_dict


def test_a_marker_file_with_text_that_is_no_utf8_is_read_line_by_line(tmp_path: Path) -> None:
    # Found by the property tests: Arrow's JSON reader kept the bad bytes and failed
    # with UnicodeDecodeError only when the GPU ids were read out.
    built = build_run(tmp_path, RunSpec(nodes=[NodeSpec("n1"), NodeSpec("n2")], steps=4))
    path = built.run_dir / "markers" / "rank-00000.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"gpu_uuid": "GPU-', b'"gpu_uuid": "\x80PU-', 1))
    report = build_report(built.run_dir)
    assert report.run.steps == 4


def test_phases_own_events_and_steps_from_read_the_same_line_by_line(tmp_path: Path) -> None:
    spec = RunSpec(
        nodes=[NodeSpec("n1", gpus=2)],
        steps=4,
        barrier_every=2,
        phases=("forward", "backward"),
        late_rank=0,
        steps_from="hf",
        marks=("eval",),
        restart_after=3,
        resume_from=2,
    )
    built = build_run(tmp_path, spec)
    report = build_report(built.run_dir)
    # rtk's checkpoint record is no user event; the failed attempt's steps 3 and 4 ran
    # again, and their phases and events count once.
    assert report.timeline.marks == {"eval": 2 * spec.steps}
    assert report.timeline.phases is not None and len(report.timeline.phases) == 2 * 2 * 4
    assert [p.count for p in report.marker_phases] == [8, 8]
    before = summary_dict(report)
    # A torn line, and a user's event whose fields Arrow's schema cannot take: the files
    # are read line by line, to the same figures.
    path = built.run_dir / "markers" / "rank-00001.jsonl"
    odd = {**json.loads(path.read_text().splitlines()[0]), "event": "odd", "name": 5, "step": 1}
    path.write_text(path.read_text() + json.dumps(odd) + "\n" + '{"v": 1, "event": "st')
    after = summary_dict(build_report(built.run_dir))
    assert after.pop("marks") == {"eval": 2 * spec.steps, "odd": 1}
    before.pop("marks")
    assert after == before
