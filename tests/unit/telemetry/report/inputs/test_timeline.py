"""inputs/timeline.py: markers and samples on the head's timeline, and the run's window.

Synthetic, format-exact run directories (tests/telemetry_fixtures.py); expected figures
are computed from the samples the fixture wrote, never typed in.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from telemetry_fixtures import BuiltRun, NodeSpec, RunSpec, build_run, gpu_uuid

from toolkit.stall.records import StallRecord
from toolkit.telemetry.report import Report, build_report, write_report
from toolkit.telemetry.report.inputs.series import read_series


def built(tmp_path: Path, *nodes: NodeSpec, **run: object) -> tuple[BuiltRun, Report]:
    fixture = build_run(tmp_path, RunSpec(nodes=list(nodes), **run))  # type: ignore[arg-type]
    return fixture, build_report(fixture.run_dir)


def test_clock_offsets_line_nodes_up(tmp_path: Path) -> None:
    fixture, report = built(
        tmp_path, NodeSpec("node1", gpus=1), NodeSpec("node2", gpus=1, offset_s=5.0)
    )
    # Every rank leaves a barrier at the same moment; corrected, their times agree.
    assert report.barriers and all(b.ranks == 2 for b in report.barriers)
    assert max(b.spread_s for b in report.barriers) < 1e-6
    assert report.window.start_s == pytest.approx(fixture.window_s[0])
    assert report.window.end_s == pytest.approx(fixture.window_s[1])
    # node2's power rises exactly when step 1 begins on the head's clock.
    step1_begin = fixture.steps[1][0]
    node2_manifest = report.data.manifest.nodes["node2"]
    series = read_series(
        "node2", report.data.traces["node2"], node2_manifest.offset_s, node2_manifest.devices, []
    )[gpu_uuid(1, 0)]
    t, power = series.values("power_w")
    first_busy = t[np.argmax(power >= fixture.spec.gpu_busy_w)]
    assert first_busy == pytest.approx(step1_begin, abs=1e-6)
    # And it lines up with the barriers: idle when the barrier lets go, busy after.
    for step, exit_s in fixture.barriers.items():
        at_exit = power[np.argmin(np.abs(t - exit_s))]
        assert at_exit == pytest.approx(fixture.spec.gpu_idle_w), step
    # Same hardware, same work: same energy, whichever clock the node keeps.
    node1, node2 = report.nodes["node1"], report.nodes["node2"]
    assert not node2.partial
    assert node2.devices[gpu_uuid(1, 0)].energy_j == pytest.approx(
        node1.devices[gpu_uuid(0, 0)].energy_j, rel=1e-9
    )
    assert node2.offset_s == 5.0


def test_markers_may_name_their_node_by_hostname(tmp_path: Path) -> None:
    fixture = build_run(
        tmp_path, RunSpec(nodes=[NodeSpec("node1"), NodeSpec("node2", offset_s=-3.0)])
    )
    for path in (fixture.run_dir / "markers").glob("rank-*.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({**r, "node": r["hostname"]}) + "\n" for r in lines))
    report = build_report(fixture.run_dir)
    assert max(b.spread_s for b in report.barriers) < 1e-6
    assert report.window.end_s == pytest.approx(fixture.window_s[1])


def test_no_markers_still_builds(tmp_path: Path) -> None:
    fixture, report = built(tmp_path, NodeSpec("node1", gpus=1), markers=False, metrics=False)
    assert report.window.basis == "samples"
    assert report.window.start_s == pytest.approx(fixture.window_s[0] - fixture.spec.lead_s)
    assert report.steps == [] and report.step_stats is None and report.phases == []
    assert report.run.steps is None and report.run.tokens_per_j is None
    assert report.run.energy_j > 0
    assert any("no markers" in note for note in report.notes)
    files = write_report(report)
    assert "No step markers" in files.html.read_text()


def test_a_run_stopped_on_a_stall_counts_its_hang_to_the_stalls_declaration(
    tmp_path: Path,
) -> None:
    """--on-stall abort: the markers end at the last completed step, but the run hung on
    until the watchdog declared the stall; the window (and so the run's time and energy)
    runs to that moment. (A torchrun run stopped so was reported as 0.1 s long.)"""
    fixture = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1")], steps=6, tail_s=5.0))
    start, last_step_s = fixture.window_s
    before = build_report(fixture.run_dir)
    assert before.window.end_s == pytest.approx(last_step_s)
    declared_s = last_step_s + 3.0
    stall = StallRecord(declared_s, 6, 3.0, 2.0, "stalled at step 6 for 3 s", collect_s=0.5)
    (fixture.run_dir / "stall.json").write_text(json.dumps([stall.to_json()]))
    after = build_report(fixture.run_dir)
    assert (after.window.start_s, after.window.end_s) == pytest.approx((start, declared_s))
    assert after.window.basis == "markers"
    assert after.run.energy_j > before.run.energy_j  # the hang's energy is the run's
    assert any("hung 3.0 s after its last step" in note for note in after.notes)
    # A stall.json that is not one: the markers' window, and a note.
    (fixture.run_dir / "stall.json").write_text("{")
    damaged = build_report(fixture.run_dir)
    assert damaged.window.end_s == pytest.approx(last_step_s)
    assert any(note.startswith("stall.json not read:") for note in damaged.notes)
