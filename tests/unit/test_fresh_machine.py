"""The suite runs as on a fresh machine: no Python with Ray on PATH.

rtk must never depend on the caller's PATH holding a Python with Ray: a job's
``python`` has to be the inventory's (its venv first on PATH, see node.env.j2).
``scripts/test.sh`` drops every PATH directory whose Python has Ray before pytest;
this test proves that held for the run (in CI it fails otherwise).
"""

from __future__ import annotations

import os
import shutil
import subprocess

from conftest import require


def test_no_python_on_path_has_ray() -> None:
    require(
        os.environ.get("RTK_TEST_CLEAN_PATH") == "1",
        "run through scripts/test.sh, which takes Ray's Pythons off PATH",
    )
    found = {}
    for name in ("python", "python3"):
        path = shutil.which(name)
        if path is None:
            continue
        done = subprocess.run(
            [path, "-c", "import ray"], capture_output=True, timeout=120, check=False
        )
        found[path] = done.returncode
    assert found, "no python on PATH at all"
    assert all(code != 0 for code in found.values()), found
