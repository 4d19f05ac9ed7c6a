"""`rtk demo`, the README's first command, runs the whole flow and cleans up."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import rtk

from toolkit.inventory import default_inventory
from toolkit.node.agent import marked_pids

pytestmark = pytest.mark.ray


def test_demo_runs_and_leaves_nothing_behind(ray_available: None, state_dir: Path) -> None:
    done = rtk("demo", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1/1 node(s) ready" in done.stdout
    assert "task for localhost ran on host" in done.stdout
    assert "demo finished in" in done.stdout
    temp_dir = default_inventory().temp_dir
    assert marked_pids(temp_dir) == {}
    assert not Path(temp_dir).exists()
    assert not (state_dir / "local").exists()
