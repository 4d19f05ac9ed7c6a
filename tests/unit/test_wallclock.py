"""The clock samples and markers are stamped with, skewed on purpose in a process."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest


@pytest.mark.parametrize(
    ("value", "expected_s"), [("5", 5.0), ("-2.5", -2.5), ("x", 0.0), ("", 0.0), ("nan", 0.0)]
)
def test_a_process_with_the_skew_variable_runs_that_far_ahead(
    value: str, expected_s: float
) -> None:
    code = (
        "import time; from toolkit import wallclock; from toolkit.rundir import MarkerWriter; "
        "import tempfile, json; d = tempfile.mkdtemp(); "
        "w = MarkerWriter(d, 0, 0, 1); r = w.write('run_start', 0); "
        "print(wallclock.wall_s() - time.time(), r.wall_s - time.time())"
    )
    env = {"PATH": "/usr/bin:/bin", "RTK_CLOCK_SKEW_S": value}
    import os

    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    clock_s, marker_s = (float(x) for x in done.stdout.split())
    assert clock_s == pytest.approx(expected_s, abs=0.05)
    assert marker_s == pytest.approx(expected_s, abs=0.05)


def test_without_the_variable_it_is_time_time() -> None:
    from toolkit import wallclock

    assert abs(wallclock.wall_s() - time.time()) < 0.05
