"""summary_json.py: summary.json carries the outliers and keeps its keys.

The 12-node run of conftest.py's ``many``: node004's sampler dies at 6 s, node006's GPU
counters count 40% more than their power, node008 throttles from 2 s to 8 s. Expected
figures come from the report's own numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.telemetry.report import Report, build_report, summary_dict


def test_summary_json_has_the_outliers_and_keeps_its_keys(many: Report) -> None:
    summary = summary_dict(many)
    assert list(summary) == [
        "v",
        "run_dir",
        "head",
        "rate_hz",
        "window",
        "run",
        "nodes",
        "cross_check",
        "steps",
        "phases",
        "barriers",
        "stragglers",
        "outliers",
        "notes",
    ]
    found = summary["outliers"]["found"]
    by = {(o["node"], o["device"], o["metric"]) for o in found}
    assert ("node006", None, "energy_j") in by and ("node008", None, "throttled_s") in by
    energy = next(o for o in found if (o["node"], o["metric"]) == ("node006", "energy_j"))
    assert energy["devices"] == 2
    assert energy["median"] == summary["outliers"]["medians"]["gpu"]["energy_j"]
    assert summary["outliers"]["compared"]["gpu"] == 2 * len(many.nodes)
    json.dumps(summary, allow_nan=False)


def test_what_the_marker_api_adds_appears_only_where_the_markers_carry_it(
    tmp_path: Path, many: Report
) -> None:
    old = summary_dict(many)
    assert "steps_from" not in old["run"] and "source" not in (old["stragglers"] or {})
    spec = RunSpec(
        nodes=[NodeSpec("node1", gpus=2), NodeSpec("node2", gpus=1)],
        steps=6,
        barrier_every=0,
        phases=("forward", "backward"),
        late_rank=0,
        steps_from="auto",
        steps_from_of={2: "api"},
        marks=("eval", "lr_drop"),
    )
    summary = summary_dict(build_report(build_run(tmp_path, spec).run_dir))
    keys = list(summary)
    assert keys.index("marker_phases") == keys.index("phases") + 1
    assert keys.index("marks") == keys.index("barriers") + 1
    run = summary["run"]
    assert run["steps_from"] == "mixed" and run["steps_from_ranks"] == {"auto": 2, "api": 1}
    assert run["steps"] == spec.steps  # the record the sweeps read is all there still
    assert summary["marks"] == {"eval": 3 * spec.steps, "lr_drop": 3 * spec.steps}
    phases = {p["name"]: p for p in summary["marker_phases"]}
    # The two --auto-steps ranks' time between steps is their input (the api rank has none).
    assert list(phases) == ["forward", "backward", "input"]
    assert phases["input"]["ranks"] == 2
    assert list(phases["backward"]) == [
        "name",
        "count",
        "ranks",
        "total_s",
        "median_rank_s",
        "max_rank_s",
        "slowest_rank",
        "energy_j",
    ]
    assert phases["backward"]["count"] == 3 * spec.steps and phases["backward"]["energy_j"] > 0
    assert summary["stragglers"]["source"] == "backward"
    json.dumps(summary, allow_nan=False)
