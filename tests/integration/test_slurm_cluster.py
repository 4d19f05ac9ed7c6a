"""rtk inside SLURM jobs on the 3-node sandbox: real sbatch, srun, slurmctld and slurmd.

A submitted training job brings Ray up on its nodes, trains with telemetry, writes the
report and ends COMPLETED; scancel of a job leaves no Ray process on any node; two
jobs sharing a node run at once on ports of their own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import RAY_TEST_CLOCKS, REPO, failure_text, require, require_sandbox_host

from toolkit.rundir.traces import read_table, row_dicts
from toolkit.sandbox import Sandbox, create, destroy
from toolkit.sandbox.hostcheck import find_tools
from toolkit.sandbox.slurm.daemons import TOOLS

pytestmark = pytest.mark.ray

RAY_PROCESSES = "raylet|gcs_server|ray start"


@pytest.fixture(scope="module")
def cluster(ray_available: None) -> Iterator[Sandbox]:
    """A 3-node sandbox ``sbslc`` on 10.77.21.0/24 running SLURM."""
    require_sandbox_host()
    missing = find_tools(tools=TOOLS)[1]
    require(not missing, f"SLURM needs {', '.join(missing)} (scripts/system-packages.sh)")
    destroy("sbslc")
    sandbox = create(3, name="sbslc", subnet="10.77.21", slurm=True)
    try:
        yield sandbox
    finally:
        destroy("sbslc")


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """A submit directory every node sees (/var/tmp is shared; each node's /tmp is not)."""
    # Unique even where an earlier run's directory of the same test was left behind.
    path = Path(tempfile.mkdtemp(prefix=f"rtk-test-slurm-{tmp_path.name}-", dir="/var/tmp"))
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def env_for(sandbox: Sandbox, workdir: Path) -> dict[str, str]:
    # sbatch passes the submitter's environment to the job (--export=ALL, the default),
    # and srun to each node's ray start: Ray runs on the tests' clocks there too.
    return {
        **os.environ,
        **RAY_TEST_CLOCKS,
        **sandbox.slurm_env(),
        "RTK_STATE_DIR": str(workdir / "state"),
    }


def rtk_in(
    sandbox: Sandbox, workdir: Path, *args: str, timeout_s: float = 600
) -> subprocess.CompletedProcess[str]:
    """rtk run from ``workdir`` (the jobs' submit directory) against the sandbox's SLURM."""
    return subprocess.run(
        [sys.executable, "-m", "toolkit", *args],
        capture_output=True,
        text=True,
        cwd=workdir,
        env=env_for(sandbox, workdir),
        timeout=timeout_s,
    )


def scontrol_job(sandbox: Sandbox, job_id: str) -> dict[str, str]:
    done = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id],
        capture_output=True,
        text=True,
        env={**os.environ, **sandbox.slurm_env()},
        timeout=30,
        check=True,
    )
    return dict(re.findall(r"(\w+)=(\S*)", done.stdout))


def ray_processes(sandbox: Sandbox) -> dict[str, str]:
    """Per node, the Ray processes still running there (empty when none)."""
    found = {}
    for node in sandbox.nodes:
        done = sandbox.run_in(node.name, ["pgrep", "-af", RAY_PROCESSES])
        if done.stdout.strip():
            found[node.name] = done.stdout.strip()
    return found


def wait_for(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(0.5)


def steps_done(run_dir: Path) -> int:
    """How many steps the run's metrics.jsonl holds (0 before it exists)."""
    metrics = run_dir / "metrics.jsonl"
    return len(metrics.read_text().splitlines()) if metrics.exists() else 0


def train_then_near_the_limit(
    cluster: Sandbox, workdir: Path, name: str, steps: int, *args: str
) -> tuple[str, Path]:
    """Submit a train-template job with a 30-minute limit, wait until it trained
    ``steps`` steps, then send its batch shell the SIGUSR1 that ``--signal=B:USR1@GRACE``
    sends before the limit. ``args``: more ``sbatch submit`` options, then ``--`` and
    rtk train's. Returns the job's id and its run directory."""
    runs = workdir / "runs"
    submitted = rtk_in(
        cluster,
        workdir,
        *("sbatch", "submit", str(cluster.inventory_path), "--template", "train"),
        *("--job-name", name, "--job-output", str(workdir / f"{name}-%j.out")),
        *("--output-dir", str(runs), "--time", "30", *args),
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    run_dir = runs / f"{name}-{job_id}"
    wait_for(lambda: steps_done(run_dir) >= steps, 240, f"{steps} training steps")
    subprocess.run(
        ["scancel", "--batch", "--signal=USR1", job_id],
        env={**os.environ, **cluster.slurm_env()},
        check=True,
        timeout=30,
    )
    return job_id, run_dir


def test_a_torchrun_job_runs_a_users_script_on_every_node_with_its_steps(
    cluster: Sandbox, workdir: Path
) -> None:
    """--template torchrun: rtk torchrun --slurm inside the allocation, the c10d
    rendezvous on the job's own port, a plain DDP script's steps from its optimizer."""
    shutil.copy(REPO / "tests" / "data" / "user_scripts" / "train_ddp.py", workdir)
    done = rtk_in(
        cluster,
        workdir,
        *("sbatch", "submit", str(cluster.inventory_path), "--template", "torchrun", "--wait"),
        *("--job-name", "ddp", "--output-dir", str(workdir / "runs")),
        *("--", "--auto-steps", "--", "train_ddp.py", "--steps", "8"),
    )
    assert done.returncode == 0, failure_text(done)
    job_id = done.stdout.split()[0]
    assert scontrol_job(cluster, job_id)["JobState"] == "COMPLETED"
    assert "rtk torchrun: 3 node(s) exited 0" in done.stdout
    run_dir = workdir / "runs" / f"ddp-{job_id}"
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    assert (summary["run"]["steps"], summary["run"]["ranks"]) == (8, 3)
    assert summary["run"]["steps_from"] == "auto"
    assert ray_processes(cluster) == {}


def test_each_preflight_policy_through_sbatch_on_a_node_failing_a_check(
    cluster: Sandbox, workdir: Path
) -> None:
    """enforce ends the job; record goes on and keeps preflight.json; skip runs no check."""
    node = cluster.nodes[2].name
    # The workload leaves a file in its run directory: proof that it ran.
    workload = ("python", "-c", "import os; open(os.environ['RTK_RUN_DIR'] + '/ran', 'w')")
    cluster.run_in(node, ["mount", "-o", "remount,size=16m", "/dev/shm"])  # fails host.dev_shm

    def submit(policy: str) -> subprocess.CompletedProcess[str]:
        return rtk_in(
            cluster,
            workdir,
            *("sbatch", "submit", str(cluster.inventory_path), "--wait"),
            *("--job-name", policy, "--run-id", policy, "--preflight", policy),
            *("--nodes", "1", f"--sbatch-arg=--nodelist={node}"),
            *("--job-output", str(workdir / f"{policy}-%j.out")),
            *("--output-dir", str(workdir / "runs"), "--", *workload),
        )

    try:  # the three jobs share the node at once, each on ports of its own
        with ThreadPoolExecutor(3) as pool:
            policies = ("enforce", "record", "skip")
            done = dict(zip(policies, pool.map(submit, policies), strict=True))
    finally:
        cluster.run_in(node, ["mount", "-o", "remount,size=50%", "/dev/shm"])

    def checks(policy: str) -> list[dict[str, str]]:
        path = workdir / "runs" / policy / "preflight.json"
        return json.loads(path.read_text())["checks"] if path.exists() else []

    def failed(policy: str) -> set[tuple[str, str]]:
        return {(c["name"], c["scope"]) for c in checks(policy) if c["status"] == "fail"}

    def ran(policy: str) -> bool:
        return (workdir / "runs" / policy / "ran").exists()

    enforce, record, skip = done["enforce"], done["record"], done["skip"]
    assert enforce.returncode != 0 and not ran("enforce"), enforce.stdout[-3000:]
    assert failed("enforce") == {("host.dev_shm", node)}
    assert record.returncode == 0 and ran("record"), record.stdout[-3000:]
    assert failed("record") == {("host.dev_shm", node)}
    # One run of the checks, not two: every check is recorded once.
    names = [(c["name"], c["scope"]) for c in checks("record")]
    assert len(names) == len(set(names)) == len(checks("enforce"))
    assert skip.returncode == 0 and ran("skip"), skip.stdout[-3000:]
    assert checks("skip") == []  # no check ran: none recorded, none enforced
    assert ray_processes(cluster) == {}


def test_two_jobs_sharing_a_node_run_at_once_on_their_own_ports_and_scancel_stops_one(
    cluster: Sandbox, workdir: Path
) -> None:
    """Two 2-node jobs share node2, each on ports of its own; the right one, held in its
    workload, is cancelled mid-run (scancel) and leaves no Ray process on any node,
    while the left one runs to its end."""
    # Ray's workers must find their own cluster, not "the" one, on a node that runs two:
    # the state API (Ray Train's PlacementGroupCleaner uses it) looks for it there.
    probe = (
        "import os, ray, sys, time\n"
        "from ray.util.state import list_nodes\n"
        "ray.init(); time.sleep(8)\n"
        "print('alive nodes:', sorted(n['NodeManagerHostname'] for n in ray.nodes() if n['Alive']), flush=True)\n"
        "def where():\n"
        "    return ray.get_runtime_context().get_node_id(), len(list_nodes())\n"
        "tasks = [ray.remote(where).options(scheduling_strategy='SPREAD').remote() for _ in range(6)]\n"
        "seen = set(ray.get(tasks))\n"
        "print('state API from', len({n for n, _ in seen}), 'node(s) sees', sorted({c for _, c in seen}), flush=True)\n"
        "if sys.argv[1:] == ['hold']:\n"
        "    print('right job', 'holding', flush=True); time.sleep(600)\n"
    )
    jobs = {}
    for name, nodes in (("left", "node1,node2"), ("right", "node2,node3")):
        submitted = rtk_in(
            cluster,
            workdir,
            *("sbatch", "submit", str(cluster.inventory_path), "--job-name", name),
            *("--nodes", "2", f"--sbatch-arg=--nodelist={nodes}"),
            *("--job-output", str(workdir / f"{name}-%j.out"), "--output-dir", str(workdir)),
            *("--", "python", "-c", probe, *(["hold"] if name == "right" else [])),
        )
        assert submitted.returncode == 0, submitted.stderr
        jobs[name] = (submitted.stdout.strip(), nodes.split(","))

    def both_running() -> bool:
        states = {scontrol_job(cluster, job_id)["JobState"] for job_id, _ in jobs.values()}
        return states == {"RUNNING"}

    wait_for(both_running, 60, "both jobs to run at once")
    right_id = jobs["right"][0]
    right_log = workdir / f"right-{right_id}.out"
    # Its own line: the job's log also shows the command, the probe's source with it.
    wait_for(
        lambda: right_log.exists() and "right job holding" in right_log.read_text().splitlines(),
        300,
        "the right job's workload to hold",
    )
    subprocess.run(
        ["scancel", right_id], env={**os.environ, **cluster.slurm_env()}, check=True, timeout=30
    )

    def ended() -> bool:
        states = [scontrol_job(cluster, job_id)["JobState"] for job_id, _ in jobs.values()]
        return all(s not in ("PENDING", "RUNNING", "COMPLETING") for s in states)

    wait_for(ended, 540, "both jobs to end")
    wait_for(lambda: not ray_processes(cluster), 60, "every Ray process to end")
    assert scontrol_job(cluster, right_id)["JobState"] == "CANCELLED"
    dashboards = set()
    for name, (job_id, nodes) in jobs.items():
        log = (workdir / f"{name}-{job_id}.out").read_text()
        if name == "left":
            assert scontrol_job(cluster, job_id)["JobState"] == "COMPLETED", log[-4000:]
        assert f"alive nodes: {nodes}" in log, log[-4000:]
        assert "state API from 2 node(s) sees [2]" in log, log[-4000:]
        dashboards.update(re.findall(r"dashboard (http://\S+)", log))
    assert len(dashboards) == 2  # one per job: different ports on the shared node2


def test_a_requeued_training_job_trains_every_step_once_over_two_allocations(
    cluster: Sandbox, workdir: Path
) -> None:
    """The time limit's SIGUSR1 stops training with a checkpoint; the job requeues itself.

    The train template's whole path is checked here too (it was a run of its own): the
    driver on the head as a local process, every step's metrics, every node's telemetry,
    the preflight under the job's cluster name, the report, and a teardown that leaves
    no Ray and no job temp dir on any node. So is the time limit's teardown (a run of
    its own too): the first allocation's training stops before its samplers, whose
    traces cover its last step; the exit status it ends with, 128 + SIGUSR1, is the
    batch script's (tests/unit/slurm/test_sbatch_script.py).

    SIGUSR1 goes to the batch shell as --signal=B:USR1@GRACE sends it, here at a step
    the test picks (slurmctld checks time limits only every 30 s or so, which would
    make the step, and the test's length, a matter of chance). SLURM holds the
    requeued job for the sandbox's cred_expire (20 s), then the second allocation
    resumes from the checkpoint and trains to the end.
    """
    job_id, run_dir = train_then_near_the_limit(
        cluster,
        workdir,
        "requeue",
        8,
        *("--requeue", "--max-restarts", "2"),
        *("--", "--model-size", "tiny", "--max-steps", "40", "--num-workers", "3"),
        # Every step at least 0.25 s (rank 0 sleeps before each barrier): the stop
        # comes well before the last step.
        *("--barrier-every", "1", "--straggle", "0:0.25", "--log-every", "10"),
    )
    log_path = workdir / f"requeue-{job_id}.out"

    def allocations() -> list[dict[str, object]]:
        path = run_dir / "allocations.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    wait_for(lambda: len(allocations()) >= 2, 420, "the second allocation's end")
    wait_for(lambda: scontrol_job(cluster, job_id)["JobState"] == "COMPLETED", 60, "COMPLETED")
    log = log_path.read_text()
    assert "SIGUSR1: the time limit is near; tearing down" in log
    first, second = allocations()
    assert first["restart_count"] == 0 and first["ended_by"] == "USR1", log[-5000:]
    assert first["requeued"] is True, first["reason"]
    stopped_at = first["last_step"]
    assert isinstance(stopped_at, int) and 8 <= stopped_at < 40
    assert second["restart_count"] == 1 and second["ended_by"] == "end"
    assert (second["requeued"], second["last_step"]) == (False, 40), second["reason"]
    assert scontrol_job(cluster, job_id)["Restarts"] == "1"
    # One log (--open-mode=append) with both allocations in it.
    assert log.count("bringing up Ray on 3 node(s)") == 2
    assert "requeued (restart 1 of 2)" in log
    # Every step trained once; the second allocation began where the first stopped.
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, 41))
    markers = [
        json.loads(line)
        for path in sorted((run_dir / "markers").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert {m["step"] for m in markers if m["event"] == "stop"} == {stopped_at}
    resumed = [m for m in markers if m["event"] == "run_start" and m["resumed"]]
    assert len(resumed) == 3 and {m["step"] for m in resumed} == {stopped_at}
    # One report over both allocations: every node's telemetry from each (one trace
    # per allocation), the time between them a gap, the restart noted.
    # Training stopped before the samplers: each node's first trace goes on past the
    # first allocation's last step (the sandbox's nodes share one clock).
    stopped_s = max(
        m["wall_s"] for m in markers if m["event"] == "step_end" and m["step"] == stopped_at
    )
    for node in cluster.nodes:
        traces = sorted((run_dir / "telemetry" / "nodes" / node.name).glob("trace-*.arrows"))
        assert len(traces) == 2, traces
        first_walls = [
            row["wall_s"]
            for batch in read_table([traces[0]]).to_batches()
            for row in row_dicts(batch)
        ]
        assert min(first_walls) < stopped_s < max(first_walls), (node.name, traces[0])
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    assert summary["run"]["steps"] == 40 and summary["run"]["restarts"] == 1
    for node in cluster.nodes:
        gaps = summary["nodes"][node.name]["gaps"]
        assert any(g["where"] == "inner" and g["duration_s"] > 10 for g in gaps), gaps
    assert (run_dir / "report" / "report.html").is_file()
    # The template's driver ran on the head, as a local process, on every node's Ray.
    assert "3/3 node(s) alive" in log
    assert "here, on the head, as a local process" in log
    assert re.search(r"step 40/40 loss", log)
    # Its Ray Train ranks got the job's env all the same (the job configuration the
    # local driver hands ray.init): each ran its Flight Recorder and watched for a dump.
    flight = sorted(p.name for p in (run_dir / "flight").glob("rank-*.json"))
    assert flight == [f"rank-{rank:05d}.json" for rank in range(3)], flight
    manifest = json.loads((run_dir / "telemetry" / "manifest.json").read_text())
    assert {n: s["status"] for n, s in manifest["nodes"].items()} == {
        n.name: "complete" for n in cluster.nodes
    }
    assert {b["ranks"] for b in summary["barriers"]} == {3}
    checked = json.loads((run_dir / "preflight.json").read_text())
    assert checked["cluster"] == f"{cluster.name}-{job_id}" and checked["status"] != "fail"
    # Teardown ran: no Ray left anywhere, and the job's temp dir is gone from every node.
    assert ray_processes(cluster) == {}
    for node in cluster.nodes:
        assert cluster.run_in(node.name, ["test", "-e", f"/tmp/rtk-{job_id}"]).returncode == 1
