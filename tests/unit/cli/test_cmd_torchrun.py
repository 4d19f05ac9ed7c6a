"""``rtk torchrun``: what a dry run shows each node running, and what is refused at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from toolkit.cli import cli, main

INVENTORY = """\
cluster: trtest
nodes:
  - host: g1
    address: 10.9.0.1
    gpus: 8
  - host: g2
    address: 10.9.0.2
    gpus: 8
  - host: c1
    address: 10.9.0.3
ports:
  rendezvous: 29500
"""


@pytest.fixture
def inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RTK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("RTK_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train_ddp.py").write_text("print('training')\n")
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    return path


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["torchrun", *args])


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """What ``rtk torchrun ARGS`` says on stderr when it refuses (exit 1)."""
    with pytest.raises(SystemExit) as exit_:
        main(args=["torchrun", *args])
    assert exit_.value.code == 1
    return capsys.readouterr().err


def test_the_dry_run_shows_each_nodes_torchrun_grouped(inventory: Path) -> None:
    done = run(
        str(inventory),
        "--auto-steps",
        "--env",
        "NCCL_DEBUG=INFO",
        "--dry-run",
        "--run-id",
        "r1",
        "--",
        "train_ddp.py",
        "--epochs",
        "1",
    )
    assert done.exit_code == 0, done.output
    out = done.output
    assert "torchrun job rtk-torchrun-r1-" in out
    lines = [line.strip() for line in out.splitlines()]
    head = next(line for line in lines if line.startswith("g1 (1):"))
    gpu = next(line for line in lines if line.startswith("g2 (1):"))
    cpu = next(line for line in lines if line.startswith("c1 (1):"))
    assert "--nproc-per-node=8" in gpu and "--nproc-per-node=1" in cpu
    # The head serves the rendezvous; the others connect to it.
    assert "--rdzv-conf=is_host=1" in head
    assert "--rdzv-conf=is_host=0" in gpu and "--rdzv-conf=is_host=0" in cpu
    for line in (head, gpu, cpu):
        assert "--nnodes=3" in line and "--rdzv-endpoint=10.9.0.1:29500" in line
        assert line.endswith("-m toolkit.markers.auto_steps train_ddp.py --epochs 1")
    assert "with NCCL_DEBUG=INFO" in lines
    assert "RTK_RUN_DIR=" in out  # every process of the job finds the run directory


def test_a_module_runs_as_torchrun_m(inventory: Path) -> None:
    done = run(str(inventory), "--dry-run", "--rdzv-port", "29999", "--", "-m", "pkg.train")
    assert done.exit_code == 0, done.output
    assert "--rdzv-endpoint=10.9.0.1:29999" in done.output
    assert "--max-restarts=0 -m toolkit.markers.script_runner -m pkg.train\n" in done.output


def test_a_missing_script_is_one_line_before_anything_starts(
    inventory: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, str(inventory), "--", "trian_ddp.py")
    assert err.startswith("rtk: trian_ddp.py: no such file in the working directory")
    assert len(err.splitlines()) == 1


def test_more_ranks_than_gpus_is_one_line(
    inventory: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, str(inventory), "--nproc-per-node", "9", "--", "train_ddp.py")
    assert "g1 has 8 GPU(s): --nproc-per-node 9 would put two ranks on one GPU" in err
    assert len(err.splitlines()) == 1


def test_bad_options_are_usage_errors(inventory: Path) -> None:
    assert run(str(inventory), "--nproc-per-node", "0", "--", "t.py").exit_code == 2
    assert run(str(inventory), "--env", "NOEQUALS", "--", "train_ddp.py").exit_code == 2
    assert run(str(inventory), "--", "-m").exit_code == 2
