"""Fixtures of the stall tests: real rank processes, every one killed at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rank_processes import Ranks


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[Ranks]:
    """Rank processes writing markers into ``tmp_path / "run"``."""
    started = Ranks(tmp_path / "run", tmp_path)
    try:
        yield started
    finally:
        started.kill_all()
