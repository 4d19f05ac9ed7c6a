"""What loading the command line pulls in: every ``rtk`` call pays for it before any work."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

# Heavy libraries that only some commands need; each of them imports lazily where used.
HEAVY = ("pyarrow", "numpy", "torch", "ray", "deepspeed", "pynvml")


def test_the_cli_loads_no_heavy_library() -> None:
    probe = (
        "import json, sys; import toolkit.cli; "
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == []
