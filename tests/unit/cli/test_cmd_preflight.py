"""``rtk preflight``: the summary by default, every check with --verbose, all of it in JSON.

The real checks run on this machine over the local transport (about a second),
against an inventory that wants more GPUs than any machine has, so one check fails
wherever the test runs; what else passes or warns depends on the machine, so the test
compares the three outputs with each other, not with fixed text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from toolkit.cli.cmd_preflight import preflight_cmd

UNFIT_INVENTORY = """\
cluster: outputtest
transport: local
nodes:
  - host: localhost
    address: 127.0.0.1
    gpus: 64
"""


def _preflight(inventory: Path, *args: str) -> str:
    done = CliRunner().invoke(preflight_cmd, [str(inventory), *args])
    assert done.exit_code == 1, done.output  # gpu.count failed
    return done.output


def test_summary_verbose_and_json_tell_the_same_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RTK_STATE_DIR", str(tmp_path / "state"))
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(UNFIT_INVENTORY)
    record = json.loads(_preflight(inventory, "--json", "--output-dir", str(tmp_path)))
    checks = record["checks"]
    statuses = [c["status"] for c in checks]

    summary = _preflight(inventory, "--output-dir", str(tmp_path)).splitlines()
    assert summary[0].startswith("preflight of outputtest: FAIL in ")
    total = next(line for line in summary if line.startswith("  total")).split()[1:]
    assert total == [str(statuses.count(s)) for s in ("pass", "warn", "fail")]
    assert not any(line.startswith("  PASS") for line in summary)
    assert any(line.split()[:3] == ["FAIL", "gpu.count", "localhost"] for line in summary)
    failed = sorted({c["name"] for c in checks if c["status"] == "fail"})  # gpu.count, maybe more
    assert (
        summary[-2]
        == f"next: investigate localhost, where node checks failed ({', '.join(failed)})"
    )

    verbose = _preflight(inventory, "--verbose", "--output-dir", str(tmp_path)).splitlines()
    assert sum(line.startswith("  PASS") for line in verbose) == statuses.count("pass")
    assert verbose[-1] == (
        f"  {statuses.count('pass')} passed, {statuses.count('warn')} warned, "
        f"{statuses.count('fail')} failed"
    )


def test_a_bad_allreduce_size_is_refused_before_anything_runs(tmp_path: Path) -> None:
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(UNFIT_INVENTORY)
    done = CliRunner().invoke(preflight_cmd, [str(inventory), "--allreduce-sizes", "1M,1.5G"])
    assert done.exit_code == 2
    assert "Invalid value for '--allreduce-sizes': '1.5G' in '1M,1.5G' is not a size" in (
        done.output
    )
