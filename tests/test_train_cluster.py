"""`rtk train` on the 3-node sandbox: Ray Train over SSH-started Ray, all three strategies.

The run directory is under /var/tmp, which every sandbox node shares with the host
(each node's /tmp is its own), as a real cluster shares an NFS home.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import rtk

from toolkit.sandbox import Sandbox
from toolkit.train.markers import read_markers

pytestmark = pytest.mark.ray

TRAIN = [
    "--model-size",
    "tiny",
    "--num-workers",
    "3",
    "--max-steps",
    "30",
    "--barrier-every",
    "5",
    "--save-steps",
    "10",
]


@pytest.fixture(scope="module")
def trained(
    sandbox_train: Sandbox, tmp_path_factory: pytest.TempPathFactory, ray_available: None
) -> Iterator[dict[str, Any]]:
    pytest.importorskip("torch")
    env = {"RTK_STATE_DIR": str(tmp_path_factory.mktemp("train-state"))}
    output = Path(f"/var/tmp/rtk-test-runs-{uuid.uuid4().hex[:8]}")
    inventory = str(sandbox_train.inventory_path)
    up = rtk("up", inventory, env=env)
    assert up.returncode == 0, up.stderr
    try:
        yield {"env": env, "output": output, "inventory": inventory}
    finally:
        rtk("down", inventory, env=env)
        shutil.rmtree(output, ignore_errors=True)


def train(ctx: dict[str, Any], run_id: str, *extra: str) -> Path:
    done = rtk(
        "train",
        ctx["inventory"],
        *TRAIN,
        "--output-dir",
        str(ctx["output"]),
        "--run-id",
        run_id,
        *extra,
        env=ctx["env"],
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "SUCCEEDED after" in done.stderr
    return ctx["output"] / run_id


def metric_steps(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def checkpoints(run_dir: Path) -> list[Path]:
    return sorted(p for p in (run_dir / "train").glob("checkpoint_*") if p.is_dir())


def check_run(run_dir: Path, sandbox: Sandbox, steps: int) -> None:
    metrics = metric_steps(run_dir)
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    assert metrics[-1]["loss"] < 0.6 * metrics[0]["loss"]
    records = read_markers(run_dir)
    ranks = sorted({r["rank"] for r in records})
    assert ranks == [0, 1, 2]
    # One rank per node, every node used.
    nodes = {r["rank"]: r["node"] for r in records if r["event"] == "run_start"}
    assert sorted(nodes.values()) == sorted(n.name for n in sandbox.nodes)
    for rank in ranks:
        barriers = [r["step"] for r in records if r["rank"] == rank and r["event"] == "barrier"]
        assert barriers == [5, 10, 15, 20, 25, 30]
    assert 1 <= len(checkpoints(run_dir)) <= 3


def test_ddp_trains_marks_barriers_and_resumes(
    trained: dict[str, Any], sandbox_train: Sandbox
) -> None:
    run_dir = train(trained, "ddp", "--strategy", "ddp")
    check_run(run_dir, sandbox_train, 30)
    assert len(checkpoints(run_dir)) == 3
    train(trained, "ddp", "--strategy", "ddp", "--resume", "--max-steps", "40")
    steps = [m["step"] for m in metric_steps(run_dir)]
    assert steps == list(range(1, 41))  # 31-40 once each: nothing repeated or skipped
    assert len(checkpoints(run_dir)) == 3  # 20, 30, 40 kept


@pytest.mark.parametrize("strategy", ["fsdp2", "deepspeed"])
def test_fsdp2_and_deepspeed_train_on_gloo_ranks(
    strategy: str, trained: dict[str, Any], sandbox_train: Sandbox
) -> None:
    if strategy == "deepspeed":
        pytest.importorskip("deepspeed")
    extra = ["--strategy", strategy] + (["--zero-stage", "2"] if strategy == "deepspeed" else [])
    check_run(train(trained, strategy, *extra), sandbox_train, 30)


def test_launch_runs_any_command_with_the_working_dir_and_cluster_env(
    trained: dict[str, Any], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "hello.py").write_text(
        "import os, socket\n"
        "print('launched on', socket.gethostname(), 'ifname', os.environ['GLOO_SOCKET_IFNAME'])\n"
    )
    done = rtk(
        "launch",
        trained["inventory"],
        "--working-dir",
        str(work),
        "--",
        "python",
        "hello.py",
        env=trained["env"],
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "launched on node1 ifname" in done.stdout
    assert "ifname lo" not in done.stdout
    failing = rtk(
        "launch",
        trained["inventory"],
        "--working-dir",
        str(work),
        "--",
        "python",
        "-c",
        "raise SystemExit(3)",
        env=trained["env"],
        timeout=300,
    )
    assert failing.returncode == 1
    assert "FAILED" in failing.stderr
