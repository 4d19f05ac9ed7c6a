"""scripts/test_times.py: the tests' worker time per folder, from a real JUnit file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))

from test_times import (  # noqa: E402
    folder_of,
    module_of,
    module_seconds,
    worker_runs,
    worker_seconds,
)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.unit.telemetry.test_sampler" name="test_a" time="1.5"/>
<testcase classname="tests.unit.telemetry.report.test_page" name="test_b" time="0.5"/>
<testcase classname="tests.unit.cli.test_cmd_up.TestUp" name="test_c" time="2.0"/>
<testcase classname="tests.integration.test_train_cluster" name="test_d" time="90"/>
</testsuite></testsuites>
"""


def test_folders_are_two_levels_under_unit_and_integration_as_one() -> None:
    assert folder_of("tests.unit.telemetry.report.test_page") == "unit/telemetry"
    assert folder_of("tests.unit.cli.test_cmd_up.TestUp") == "unit/cli"
    assert folder_of("tests.integration.test_train_cluster") == "integration"
    assert module_of("tests.integration.test_train_cluster.TestX") == "test_train_cluster"
    assert module_of("tests.unit.cli.test_cmd_up") is None


def test_worker_time_sums_per_folder_and_prints_largest_first(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT, encoding="utf-8")
    assert worker_seconds(str(path)) == {
        "unit/telemetry": (2.0, 2),
        "unit/cli": (2.0, 1),
        "integration": (90.0, 1),
    }
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "test_times.py"), str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "== test time per folder (worker time, 1.6 min in all)"
    assert lines[1].split() == ["integration", "1.5", "min", "1", "tests"]
    assert module_seconds(str(path)) == {"test_train_cluster": (90.0, 1)}
    assert lines[4] == "== integration modules (worker time, bring-ups included)"
    assert lines[5].split() == ["test_train_cluster", "1.5", "min", "1", "tests"]
    assert len(lines) == 6


def test_write_seconds_keeps_each_modules_seconds_for_the_scheduler(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT.replace('time="0.5"', 'time="0.4"'), encoding="utf-8")
    out = tmp_path / "seconds.json"
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "test_times.py"), str(path)]
        + ["--write-seconds", str(out)],
        capture_output=True,
        check=True,
    )
    # Per module (a class's tests count for its module); under half a second, left out.
    assert json.loads(out.read_text()) == {
        "tests/integration/test_train_cluster.py": 90,
        "tests/unit/cli/test_cmd_up.py": 2,
        "tests/unit/telemetry/test_sampler.py": 2,
    }


def test_the_timeline_shows_each_workers_long_modules_in_order_and_its_end(
    tmp_path: Path,
) -> None:
    """What tests/conftest.py writes under RTK_TEST_TIMELINE, read back per worker."""
    t0 = 1_800_000_000.0
    timeline = tmp_path / "timeline.txt"
    rows = [
        ("gw1", 0, 1, "tests/unit/cli/test_cmd_up.py::test_a"),
        ("gw0", 0, 200, "tests/integration/test_train_cluster.py::test_b"),
        ("gw0", 200, 560, "tests/integration/test_train_cluster.py::test_c"),
        ("gw1", 1, 2, "tests/unit/cli/test_cmd_up.py::test_d"),
        ("gw0", 560, 590, "tests/unit/train/test_loop.py::test_e"),
        ("gw1", 2, 122, "tests/integration/test_demo.py::test_f"),
    ]
    text = "".join(f"{w} {t0 + a:.2f} {t0 + b:.2f} {node}\n" for w, a, b, node in rows)
    timeline.write_text(text + "a line torn by a kill\n", encoding="utf-8")
    runs = worker_runs(timeline.read_text().splitlines())
    assert runs["gw0"] == [
        ("tests/integration/test_train_cluster.py", t0, t0 + 560),
        ("tests/unit/train/test_loop.py", t0 + 560, t0 + 590),
    ]
    assert [m for m, _, _ in runs["gw1"]] == [
        "tests/unit/cli/test_cmd_up.py",
        "tests/integration/test_demo.py",
    ]
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "test_times.py"), str(junit)]
        + ["--timeline", str(timeline)],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    at = lines.index(
        "== each worker's stretch (modules of a minute or more, minutes from the start)"
    )
    assert lines[at + 1 :] == [
        "  gw0   ends   9.8 min: test_train_cluster 0.0-9.3 (+1 shorter)",
        "  gw1   ends   2.0 min: test_demo 0.0-2.0 (+1 shorter)",
    ]
