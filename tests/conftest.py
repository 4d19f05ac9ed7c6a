from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def require(condition: bool, why: str) -> None:
    """Skip when a testbed piece is missing here; in CI (CI=true) that is a failure."""
    if condition:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"testbed missing in CI: {why}")
    pytest.skip(why)


def rtk(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the rtk CLI as a user would, in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "toolkit", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        input=input,
        check=False,
    )


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated rtk state directory for this test."""
    path = tmp_path / "state"
    monkeypatch.setenv("RTK_STATE_DIR", str(path))
    return path


@pytest.fixture(scope="session")
def ray_available() -> None:
    require(shutil.which("bash") is not None, "bash is needed")
    try:
        import ray  # noqa: F401
    except ImportError:
        require(False, "ray is not installed")
