"""summary_json.py: summary.json carries the outliers and keeps its keys.

The 12-node run of conftest.py's ``many``: node004's sampler dies at 6 s, node006's GPU
counters count 40% more than their power, node008 throttles from 2 s to 8 s. Expected
figures come from the report's own numbers.
"""

from __future__ import annotations

import json

from toolkit.telemetry.report import Report, summary_dict


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
