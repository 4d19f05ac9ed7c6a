"""Fixtures of the marker tests: markers switched on for one test, as rtk would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from toolkit.markers import recorder


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    """Markers on, as under rtk: RTK_RUN_DIR is the test's run directory."""
    path = tmp_path / "run"
    recorder.reset({"RTK_RUN_DIR": str(path)})
    yield path
    recorder.reset({})
