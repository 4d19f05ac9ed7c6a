"""`rtk demo`, the README's first command, runs the whole flow and cleans up."""

from __future__ import annotations

import json
import re
from importlib.util import find_spec
from pathlib import Path

import pytest
from conftest import failure_text, require, rtk

from toolkit.inventory import default_inventory
from toolkit.node.agent import marked_pids

pytestmark = pytest.mark.ray


def test_demo_trains_with_telemetry_reports_and_leaves_nothing_behind(
    ray_available: None, state_dir: Path, tmp_path: Path
) -> None:
    require(find_spec("torch") is not None, "torch is not installed (pip install '.[train]')")
    done = rtk("demo", "--output-dir", str(tmp_path), timeout=600)
    assert done.returncode == 0, failure_text(done)
    assert "1/1 node(s) ready" in done.stdout
    assert "task for localhost ran on host" in done.stdout
    assert "preflight of local: " in done.stdout
    assert "demo finished in" in done.stdout
    # The report: printed, written, and about the run that just happened.
    html = Path(re.findall(r"open the report: (\S+)", done.stdout)[-1])
    assert html.is_file() and html.is_relative_to(tmp_path)
    run_dir = html.parent.parent
    summary = json.loads((html.parent / "summary.json").read_text())
    assert summary["run"]["steps"] == 100
    assert summary["run"]["energy_j"] > 0
    assert "localhost/host           modelled" in done.stdout
    markers = sorted((run_dir / "markers").glob("rank-*.jsonl"))
    assert len(markers) == 2
    for plot in ("power", "step_energy", "utilization"):
        assert (html.parent / "plots" / f"{plot}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Nothing left running or lying around.
    temp_dir = default_inventory().temp_dir
    assert marked_pids(temp_dir) == {}
    assert not Path(temp_dir).exists()
    assert not (state_dir / "local").exists()
