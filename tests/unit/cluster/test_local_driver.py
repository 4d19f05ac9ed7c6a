"""A job's driver as a process on the head (``--driver local``): real processes, real sockets."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolkit.cluster import build_plan
from toolkit.cluster.local_driver import (
    is_local_address,
    local_driver_problem,
    run_local_driver,
)
from toolkit.errors import JobError
from toolkit.flows import Driver, Session, TrainWorkload
from toolkit.inventory import Inventory, parse_inventory
from toolkit.train.config import TrainConfig


@pytest.fixture
def ray_dir() -> Iterator[str]:
    """A Ray temp dir short enough for an inventory (pytest's tmp_path is too long)."""
    path = tempfile.mkdtemp(prefix="rtk-drv-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def inventory(tmp_path: Path, ray_dir: str, address: str = "127.0.0.1") -> Inventory:
    text = (
        "cluster: drv\ntransport: local\n"
        f"nodes:\n  - host: localhost\n    address: {address}\n"
        f"ray:\n  temp_dir: {ray_dir}\n  auth: token\n"
    )
    return parse_inventory(text, "inventory.yaml", tmp_path)


def test_this_machines_addresses_are_local_and_others_are_not() -> None:
    assert is_local_address("127.0.0.1")
    assert is_local_address("localhost")
    assert not is_local_address("192.0.2.7")  # TEST-NET-1: never assigned
    assert not is_local_address("no-such-host.invalid")


def test_only_what_a_process_can_be_given_runs_locally() -> None:
    assert (
        local_driver_problem({"env_vars": {"A": "1"}, "working_dir": ".", "py_modules": []}) is None
    )
    problem = local_driver_problem({"env_vars": {}, "pip": ["x"], "conda": "y"})
    assert problem is not None and "conda, pip" in problem and "--driver job" in problem


def test_the_driver_gets_the_nodes_env_file_the_cluster_and_the_jobs_env(
    tmp_path: Path, ray_dir: str
) -> None:
    plan = build_plan(inventory(tmp_path, ray_dir))
    env_file = Path(plan.paths.env_file)
    env_file.parent.mkdir(parents=True)
    env_file.write_text("NODE_VAR=from-env-file\n")
    work = tmp_path / "work"
    work.mkdir()
    lines: list[str] = []
    script = (
        'echo "$NODE_VAR $JOB_VAR $RAY_ADDRESS $RAY_AUTH_TOKEN_PATH ${RAY_AUTH_TOKEN-unset}"; '
        "pwd; echo to-stderr >&2"
    )
    outcome = run_local_driver(
        plan,
        script,
        {"env_vars": {"JOB_VAR": "from-job"}, "working_dir": str(work)},
        "rtk-train-x-1",
        lines.append,
    )
    assert outcome.ok and outcome.job_id == "rtk-train-x-1", lines
    assert lines[0].startswith("rtk: running rtk-train-x-1 here, on the head")
    assert lines[1:] == [
        f"from-env-file from-job 127.0.0.1:6379 {plan.paths.token_file} unset",
        str(work),
        "to-stderr",
    ]


def test_shipped_modules_are_imported_from_here(tmp_path: Path, ray_dir: str) -> None:
    plan = build_plan(inventory(tmp_path, ray_dir))
    package = tmp_path / "shipped" / "mymod"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("WHERE = 'shipped'\n")
    lines: list[str] = []
    entrypoint = f"{sys.executable} -c 'import mymod; print(mymod.WHERE)'"
    outcome = run_local_driver(
        plan, entrypoint, {"py_modules": [str(package)]}, "job", lines.append
    )
    assert outcome.ok and lines[-1] == "shipped", lines


def test_a_failing_driver_is_a_failed_job_with_its_status(tmp_path: Path, ray_dir: str) -> None:
    plan = build_plan(inventory(tmp_path, ray_dir))
    outcome = run_local_driver(plan, "echo trying; exit 3", {}, "job", lambda line: None)
    assert outcome.status == "FAILED" and not outcome.ok
    assert "status 3" in outcome.message


def test_a_runtime_env_only_ray_provides_is_refused_before_anything_runs(
    tmp_path: Path, ray_dir: str
) -> None:
    plan = build_plan(inventory(tmp_path, ray_dir))
    marker = tmp_path / "ran"
    with pytest.raises(JobError, match="pip.*--driver job"):
        run_local_driver(plan, f"touch {marker}", {"pip": ["requests"]}, "job", print)
    assert not marker.exists()


def test_ctrl_c_hands_sigint_to_the_driver_and_waits_for_it(tmp_path: Path, ray_dir: str) -> None:
    plan = build_plan(inventory(tmp_path, ray_dir))
    lines: list[str] = []
    ready = threading.Event()

    def echo(line: str) -> None:
        lines.append(line)
        if line == "waiting":
            ready.set()

    # The driver saves its work on SIGINT, as Ray Train's driver does, then ends.
    script = "trap 'echo got SIGINT; exit 130' INT; echo waiting; while :; do sleep 0.1; done"

    def interrupt() -> None:
        assert ready.wait(30)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        run_local_driver(plan, script, {}, "job", echo)
    assert "got SIGINT" in lines, lines
    assert any(line.startswith("rtk: stopping job (SIGINT") for line in lines)


def test_auto_runs_the_driver_here_only_inside_a_slurm_allocation_on_the_head(
    tmp_path: Path, ray_dir: str
) -> None:
    with Session(inventory(tmp_path, ray_dir)) as here:
        assert here.place_driver(Driver.AUTO, {"SLURM_JOB_ID": "7"}) is Driver.LOCAL
        assert here.place_driver(Driver.AUTO, {}) is Driver.JOB
        assert here.place_driver(Driver.LOCAL) is Driver.LOCAL
        assert here.place_driver(Driver.JOB, {"SLURM_JOB_ID": "7"}) is Driver.JOB
    with Session(inventory(tmp_path, ray_dir, "192.0.2.7")) as elsewhere:
        assert elsewhere.place_driver(Driver.AUTO, {"SLURM_JOB_ID": "7"}) is Driver.JOB
        with pytest.raises(JobError, match=r"head of 'drv' is 192\.0\.2\.7.*--driver job"):
            elsewhere.place_driver(Driver.LOCAL)


def test_the_dry_run_says_where_the_driver_runs(tmp_path: Path, ray_dir: str) -> None:
    with Session(inventory(tmp_path, ray_dir)) as session:
        workload = TrainWorkload(TrainConfig(run_dir=str(tmp_path / "run")), "r1")
        local = session.job_request(workload, Driver.LOCAL)
        job = session.job_request(workload, Driver.JOB)
    assert "as a process here, on the head (not through the Jobs API)" in local.render()
    assert local.to_json()["driver"] == "local" and job.to_json()["driver"] == "job"
    assert "via http://127.0.0.1:8265" in job.render()


def test_the_driver_ends_when_rtk_is_killed(tmp_path: Path, ray_dir: str) -> None:
    """SIGKILL to rtk (an sbatch teardown past its grace) must not leave a driver training."""
    ended = tmp_path / "ended"
    started = tmp_path / "started"
    script = (
        f"trap 'echo TERM > {ended}; exit 143' TERM; touch {started}; while :; do sleep 0.1; done"
    )
    program = (
        "import sys\n"
        "from pathlib import Path\n"
        "from toolkit.cluster import build_plan\n"
        "from toolkit.cluster.local_driver import run_local_driver\n"
        "from toolkit.inventory import parse_inventory\n"
        "inv = parse_inventory(sys.argv[1], 'inventory.yaml', Path('.'))\n"
        "run_local_driver(build_plan(inv), sys.argv[2], {}, 'job', print)\n"
    )
    text = (
        "cluster: drv\ntransport: local\nnodes:\n  - host: localhost\n    address: 127.0.0.1\n"
        f"ray:\n  temp_dir: {ray_dir}\n"
    )
    rtk = subprocess.Popen(
        [sys.executable, "-c", program, text, script],
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    try:
        deadline = time.monotonic() + 30
        while not started.exists():
            assert time.monotonic() < deadline and rtk.poll() is None, "the driver never started"
            time.sleep(0.05)
        rtk.kill()
        rtk.wait()
        deadline = time.monotonic() + 10
        while not ended.exists():
            assert time.monotonic() < deadline, "the driver outlived rtk"
            time.sleep(0.05)
        assert ended.read_text().strip() == "TERM"
    finally:
        rtk.kill()
