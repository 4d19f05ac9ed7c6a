"""`rtk train` on the 3-node sandbox: Ray Train over SSH-started Ray, all three strategies.

The run directory is under /var/tmp, which every sandbox node shares with the host
(each node's /tmp is its own), as a real cluster shares an NFS home.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
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
    progress = re.findall(r"step (\d+)/\d+ loss", done.stdout)
    assert progress and len(progress) == len(set(progress)), "progress lines repeated"
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


def test_a_lost_worker_node_restarts_from_the_last_checkpoint(
    trained: dict[str, Any], sandbox_train: Sandbox
) -> None:
    """Kill every Ray process of one worker node mid-run; ``rtk up`` brings it back."""
    victim = sandbox_train.nodes[-1].name
    run_dir = trained["output"] / "failover"
    argv = [
        *("--max-steps", "120", "--save-steps", "20", "--gradient-accumulation-steps", "4"),
        *("--max-failures", "1", "--restart-wait-s", "120"),
    ]
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolkit",
            "train",
            trained["inventory"],
            *TRAIN,
            *argv,
            "--output-dir",
            str(trained["output"]),
            "--run-id",
            "failover",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **trained["env"]},
    )
    try:
        deadline = time.monotonic() + 300
        while len(metric_lines(run_dir)) < 45:
            assert job.poll() is None, job.communicate()[0][-4000:]
            assert time.monotonic() < deadline, "the run never reached step 45"
            time.sleep(0.2)
        # The victim's training worker is one of the processes killed.
        assert sandbox_train.run_in(victim, ["pgrep", "-f", "RayTrainWorker"]).returncode == 0
        killed = sandbox_train.run_in(victim, ["pkill", "-9", "-f", "ray"])
        assert killed.returncode == 0, killed.stderr
        killed_at = len(metric_lines(run_dir))
        up = rtk("up", trained["inventory"], env=trained["env"], timeout=300)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        output, _ = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, output[-4000:]
    assert "SUCCEEDED after" in output
    assert killed_at < 120, "the kill came after the run had finished"
    assert [m["step"] for m in metric_steps(run_dir)] == list(range(1, 121))
    starts = [r for r in read_markers(run_dir) if r["event"] == "run_start"]
    restarts = [r for r in starts if r["resumed"]]
    # Every rank restarted once, from one checkpoint, on all three nodes again. Which
    # checkpoint: Ray Train's controller collects reports every 2 s, so a node lost
    # within 2 s of a checkpoint restarts from the one before.
    assert len(restarts) == 3
    restart_steps = {r["step"] for r in restarts}
    assert len(restart_steps) == 1
    assert restart_steps <= {20, 40, 60, 80, 100}
    assert restarts[0]["step"] <= killed_at

    assert sorted({r["node"] for r in restarts}) == sorted(n.name for n in sandbox_train.nodes), [
        (r["rank"], r["node"], r["hostname"], r["step"], r["wall_s"]) for r in starts
    ]
    superseded = run_dir / "metrics.superseded.jsonl"
    restarted_at = restarts[0]["step"]
    if superseded.exists():
        assert all(
            json.loads(x)["step"] > restarted_at for x in superseded.read_text().splitlines()
        )


def metric_lines(run_dir: Path) -> list[str]:
    try:
        return (run_dir / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
