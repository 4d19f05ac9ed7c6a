"""``rtk profile`` on the sandbox: a sweep over the node count (1, then 2) of the tiny
model, interrupted with Ctrl-C, resumed without redoing finished runs, with its table,
CSV and plots. How a sweep of several axes is ordered (node counts together, so the
cluster comes up once per count) is tests/unit/profile's to check."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import RAY_TEST_CLOCKS, failure_text, require_sandbox_host

from toolkit.sandbox import Sandbox, create, destroy

pytestmark = pytest.mark.ray

EXPERIMENT = """\
name: tiny-sweep
inventory: {inventory}
output_dir: sweep
workload:
  train: {{model_size: tiny, max_steps: 10, barrier_every: 5, save_steps: 0, log_every: 10}}
axes:
  nodes: [1, 2]
baseline_s: 1
cooldown_max_s: 2
"""


@pytest.fixture(scope="module")
def sandbox(ray_available: None) -> Iterator[Sandbox]:
    require_sandbox_host()
    destroy("sbprof")
    made = create(2, name="sbprof", subnet="10.77.25", ray_env=RAY_TEST_CLOCKS)
    try:
        yield made
    finally:
        destroy("sbprof")


def records(sweep: Path) -> dict[str, dict[str, object]]:
    found = {}
    for path in sweep.glob("runs/*/profile_run.json"):
        record = json.loads(path.read_text())
        found[str(record["run_id"])] = record
    return found


def ray_left(sandbox: Sandbox) -> dict[str, str]:
    left = {}
    for node in sandbox.nodes:
        done = sandbox.run_in(node.name, ["pgrep", "-af", "raylet|gcs_server"])
        if done.stdout.strip():
            left[node.name] = done.stdout.strip()
    return left


def test_a_sweep_is_interrupted_resumed_and_summarised(sandbox: Sandbox) -> None:
    # The run directories are written by the head and read here: /var/tmp is shared.
    workdir = Path("/var/tmp") / f"rtk-test-profile-{uuid.uuid4().hex[:8]}"
    workdir.mkdir()
    try:
        _sweep(sandbox, workdir)
    finally:
        subprocess.run(["rm", "-rf", str(workdir)], check=False)


def _sweep(sandbox: Sandbox, workdir: Path) -> None:
    experiment = workdir / "sweep.yaml"
    experiment.write_text(EXPERIMENT.format(inventory=sandbox.inventory_path))
    sweep = workdir / "sweep"
    env = {**os.environ, "RTK_STATE_DIR": str(workdir / "state")}
    argv = [sys.executable, "-m", "toolkit", "profile", str(experiment)]

    first = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        deadline = time.monotonic() + 420
        while sum(r["status"] == "succeeded" for r in records(sweep).values()) < 1:
            assert first.poll() is None, first.communicate()[0][-4000:]
            assert time.monotonic() < deadline, "the first run did not finish in time"
            time.sleep(0.5)
        first.send_signal(signal.SIGINT)  # Ctrl-C, in the middle of the sweep
        output = first.communicate(timeout=180)[0]
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130, output[-4000:]
    done_before = {k: v for k, v in records(sweep).items() if v["status"] == "succeeded"}
    # The Ctrl-C came while the cluster of the second run came up (or its run began).
    assert {str(k) for k in done_before} == {"nodes=1#1"}
    stamps = {
        run_id: (sweep / "runs" / Path(str(r["run_dir"])).name / "profile_run.json").stat()
        for run_id, r in done_before.items()
    }
    assert ray_left(sandbox) == {}  # the interrupted sweep took its cluster down

    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, failure_text(again)
    assert f"{len(done_before)} finished earlier and skipped" in again.stdout
    final = records(sweep)
    assert {r["status"] for r in final.values()} == {"succeeded"}
    assert len(final) == 2
    for run_id, stat in stamps.items():  # finished runs were not redone
        path = sweep / "runs" / Path(str(final[run_id]["run_dir"])).name / "profile_run.json"
        assert path.stat().st_mtime_ns == stat.st_mtime_ns
    for record in final.values():
        baseline = record["baseline"]
        cooldown = record["cooldown"]
        assert isinstance(baseline, dict) and baseline["power_w"] > 0
        assert isinstance(cooldown, dict) and cooldown["duration_s"] > 0
        run_dir = Path(str(record["run_dir"]))
        summary = json.loads((run_dir / "report" / "summary.json").read_text())
        assert summary["run"]["steps"] == 10
        assert len(summary["nodes"]) == record["axes"]["nodes"]  # type: ignore[index]

    with (sweep / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["nodes"] for r in rows) == ["1", "2"]
    for row in rows:
        assert float(row["tokens_per_s_mean"]) > 0 and float(row["energy_per_token_j_mean"]) > 0
        assert row["repeats_ok"] == "1"
    assert any(r["pareto"] == "true" for r in rows)
    assert {r["pareto_basis"] for r in rows} == {"(tokens/s, J/token)"}
    import matplotlib.image

    for name in ("energy_per_token_vs_nodes.png", "pareto_front.png"):
        image = matplotlib.image.imread(sweep / "plots" / name)
        assert image.shape[0] > 100 and image.shape[1] > 100
    table = [line for line in again.stdout.splitlines() if " ± " in line and "   1  " in line]

    assert len(table) == 2
    assert "best: lowest energy per token" in again.stdout


def test_a_failed_run_is_recorded_and_the_sweep_goes_on(sandbox: Sandbox) -> None:
    workdir = Path("/var/tmp") / f"rtk-test-profile-{uuid.uuid4().hex[:8]}"
    workdir.mkdir()
    try:
        experiment = workdir / "fail.yaml"
        experiment.write_text(
            f"name: exits\ninventory: {sandbox.inventory_path}\noutput_dir: sweep\n"
            "workload:\n  command: [python, -c, "
            "'import os, sys; sys.exit(int(os.environ[\"RTK_AXIS_CODE\"]))']\n"
            "axes:\n  code: [3, 0]\nbaseline_s: 0\ncooldown_max_s: 0\n"
        )
        env = {**os.environ, "RTK_STATE_DIR": str(workdir / "state")}
        argv = [sys.executable, "-m", "toolkit", "profile", str(experiment)]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-3000:]
        assert "2 run(s) this time (1 failed)" in done.stdout
        final = records(workdir / "sweep")
        assert final["code=3#1"]["status"] == "failed"
        assert "FAILED" in str(final["code=3#1"]["error"])
        assert final["code=0#1"]["status"] == "succeeded"  # ran after the failure
        with (workdir / "sweep" / "runs.csv").open() as f:
            statuses = {r["run_id"]: r["status"] for r in csv.DictReader(f)}
        assert statuses == {"code=3#1": "failed", "code=0#1": "succeeded"}
        # That a sweep run again retries only its failed runs is the plan's (the dry run
        # in tests/unit/flows/test_sweep.py), and skipping finished ones is checked above.
    finally:
        subprocess.run(["rm", "-rf", str(workdir)], check=False)
