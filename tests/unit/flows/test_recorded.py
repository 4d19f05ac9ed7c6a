"""The recorded run's flow without the CLI: its plan, its check, its run id."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from toolkit.flows import CommandWorkload, Session
from toolkit.flows.recorded import default_run_id, run_recorded
from toolkit.flows.run import RunEvents
from toolkit.inventory import load_inventory

INVENTORY = """\
cluster: rectest
nodes:
  - host: a1
    address: 10.9.0.1
  - host: a2
    address: 10.9.0.2
"""


@pytest.fixture
def inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RTK_STATE_DIR", str(tmp_path / "state"))
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    return path


def test_a_dry_run_shows_the_plan_after_the_check_and_runs_nothing(inventory: Path) -> None:
    checked: list[bool] = []
    shown: list[str] = []

    def check(session: Session, dry_run: bool) -> None:
        assert session.plan.inventory.name == "rectest"
        checked.append(dry_run)

    workload = CommandWorkload(("python", "x.py"), str(inventory.parent), run_dir="/runs/r1")
    done = run_recorded(
        load_inventory(inventory), workload, RunEvents(), print, check, shown.append
    )
    assert done is None and checked == [True]
    (plan,) = shown
    assert "python x.py" in plan and "/runs/r1" in plan


def test_the_default_run_id_is_the_clusters_name_and_the_time(inventory: Path) -> None:
    assert re.fullmatch(r"rectest-\d{8}-\d{6}", default_run_id(load_inventory(inventory)))
