"""A job's driver as a process on the head (``--driver local``): real processes, real sockets."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from toolkit.cluster.plan import build_plan
from toolkit.errors import JobError
from toolkit.flows import Driver, PreflightPolicy, Session, TrainWorkload
from toolkit.inventory import Inventory, parse_inventory
from toolkit.jobs.local_driver import (
    GATE_EXIT_WAIT_S,
    JOB_CONFIG_VARIABLE,
    LocalDriver,
    is_local_address,
    local_driver_problem,
    run_local_driver,
)
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


def test_the_drivers_ray_workers_get_the_jobs_env_vars_as_under_the_jobs_api(
    tmp_path: Path, ray_dir: str
) -> None:
    """The job configuration Ray's supervisor hands its driver, read by Ray's own parser."""
    from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR
    from ray.job_config import JobConfig

    assert JOB_CONFIG_VARIABLE == RAY_JOB_CONFIG_JSON_ENV_VAR
    plan = build_plan(inventory(tmp_path, ray_dir))
    lines: list[str] = []
    env_vars = {"TORCH_FR_BUFFER_SIZE": "500", "JOB_VAR": "x y"}
    outcome = run_local_driver(
        plan, f'echo "${JOB_CONFIG_VARIABLE}"', {"env_vars": env_vars}, "j-1", lines.append
    )
    assert outcome.ok, lines
    config = JobConfig.from_json(json.loads(lines[-1]))
    assert config.runtime_env["env_vars"] == env_vars


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


# The driver saves its work on SIGINT, as Ray Train's driver does, then ends.
SAVES_ON_SIGINT = "trap 'echo got SIGINT; exit 130' INT; echo waiting; while :; do sleep 0.1; done"


def echo_until_waiting() -> tuple[list[str], threading.Event, Callable[[str], None]]:
    """The driver's lines, an event set once it prints "waiting", and the echo that does both."""
    lines: list[str] = []
    ready = threading.Event()

    def echo(line: str) -> None:
        lines.append(line)
        if line == "waiting":
            ready.set()

    return lines, ready, echo


def test_ctrl_c_hands_sigint_to_the_driver_and_waits_for_it(tmp_path: Path, ray_dir: str) -> None:
    plan = build_plan(inventory(tmp_path, ray_dir))
    lines, ready, echo = echo_until_waiting()

    def interrupt() -> None:
        assert ready.wait(30)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        run_local_driver(plan, SAVES_ON_SIGINT, {}, "job", echo)
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


def test_only_a_local_trainer_starts_ahead_and_the_dry_run_says_so(
    tmp_path: Path, ray_dir: str
) -> None:
    workload = TrainWorkload(TrainConfig(run_dir=str(tmp_path / "run")), "r1")
    with Session(inventory(tmp_path, ray_dir)) as session:
        ahead = session.driver_ahead(workload, Driver.LOCAL)
        assert ahead is not None and ahead.request.driver is Driver.LOCAL
        assert session.driver_ahead(workload, Driver.JOB) is None
        local = session.run_plan(workload, PreflightPolicy.SKIP, driver=Driver.LOCAL, bring_up=True)
        job = session.run_plan(workload, PreflightPolicy.SKIP, driver=Driver.JOB, bring_up=True)
    assert "waits until the cluster is up" in local.render()
    assert "waits until the cluster is up" not in job.render()


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
        "from toolkit.cluster.plan import build_plan\n"
        "from toolkit.jobs.local_driver import run_local_driver\n"
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


# An entrypoint that honours the gate as toolkit.train.job does: it says when its
# imports are done, then runs only when let through.
GATED = (
    f"{sys.executable} -c 'import os, sys; "
    "from toolkit.driver_gate import gate_passed; "
    'print("imported", flush=True); '
    'print("ran" if gate_passed(os.environ, sys.stdin) else "not wanted", flush=True)\''
)


class Seen:
    """The driver's lines, and an event per line awaited."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()

    def __call__(self, line: str) -> None:
        with self._cond:
            self.lines.append(line)
            self._cond.notify_all()

    def wait_for(self, line: str, timeout_s: float = 30.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: line in self.lines, timeout_s), self.lines


def gated_driver(tmp_path: Path, ray_dir: str, seen: Seen) -> LocalDriver:
    plan = build_plan(inventory(tmp_path, ray_dir))
    # What the bring-up has written when it starts the driver (head_ready).
    Path(plan.paths.env_file).parent.mkdir(parents=True)
    Path(plan.paths.env_file).write_text("NODE_VAR=1\n")
    env = {"env_vars": {"PYTHONPATH": str(Path(__file__).parents[3])}}
    return LocalDriver(plan, GATED, env, "rtk-train-ahead", seen)


def test_a_gated_driver_imports_then_waits_until_released(tmp_path: Path, ray_dir: str) -> None:
    seen = Seen()
    driver = gated_driver(tmp_path, ray_dir, seen)
    driver.start(gated=True)
    seen.wait_for("imported")
    time.sleep(0.5)
    assert "ran" not in seen.lines, "the driver went on before it was let through"
    driver.release()
    outcome = driver.wait()
    assert outcome.ok, seen.lines
    assert seen.lines[0].startswith("rtk: starting rtk-train-ahead here, on the head")
    assert seen.lines[1:] == ["imported", "ran"]


def test_a_driver_started_from_a_thread_that_ends_lives_on(tmp_path: Path, ray_dir: str) -> None:
    """The bring-up's thread starts it and ends: Linux's parent-death signal follows the
    starting thread, so a driver started by it directly got SIGTERM there (seen under
    SLURM: "ended (status -15) before the cluster was up")."""
    seen = Seen()
    driver = gated_driver(tmp_path, ray_dir, seen)
    starter = threading.Thread(target=driver.start, kwargs={"gated": True})
    starter.start()
    starter.join()
    seen.wait_for("imported")
    time.sleep(0.5)
    driver.release()
    assert driver.wait().ok, seen.lines
    assert seen.lines[1:] == ["imported", "ran"]


def test_a_cancelled_driver_ends_without_running(tmp_path: Path, ray_dir: str) -> None:
    seen = Seen()
    driver = gated_driver(tmp_path, ray_dir, seen)
    driver.start(gated=True)
    seen.wait_for("imported")
    began = time.monotonic()
    driver.cancel()
    assert time.monotonic() - began < GATE_EXIT_WAIT_S
    assert seen.lines[1:] == ["imported", "not wanted"]


def test_cancel_before_start_makes_the_start_do_nothing(tmp_path: Path, ray_dir: str) -> None:
    """The bring-up failed before the head was ready: its thread may still call start."""
    seen = Seen()
    driver = gated_driver(tmp_path, ray_dir, seen)
    driver.cancel()
    driver.start(gated=True)
    assert seen.lines == []
    with pytest.raises(JobError, match="was not started"):
        driver.release()


def test_without_the_gate_the_same_entrypoint_runs_at_once(tmp_path: Path, ray_dir: str) -> None:
    seen = Seen()
    driver = gated_driver(tmp_path, ray_dir, seen)
    driver.start()
    assert driver.wait().ok
    assert seen.lines[1:] == ["imported", "ran"]


def test_the_trainer_held_at_the_gate_exits_untouched_when_not_wanted(tmp_path: Path) -> None:
    """toolkit.train.job honours the gate: end of input, and it exits 0 having made nothing."""
    run_dir = tmp_path / "run"
    config = TrainConfig(run_dir=str(run_dir), max_steps=1).check().to_json()
    done = subprocess.run(
        [sys.executable, "-m", "toolkit.train.job", json.dumps(config)],
        env={**os.environ, "RTK_DRIVER_GATE": "stdin"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert not run_dir.exists()


def test_ctrl_c_before_the_wait_begins_still_stops_the_driver(tmp_path: Path, ray_dir: str) -> None:
    """Ctrl-C may land between the start and the wait (CI saw it): the driver is stopped."""
    plan = build_plan(inventory(tmp_path, ray_dir))
    lines, ready, echo = echo_until_waiting()
    driver = LocalDriver(plan, SAVES_ON_SIGINT, {}, "job", echo)
    driver.start()
    assert ready.wait(30)
    driver.interrupt()  # what a KeyboardInterrupt outside ``wait`` leads to
    driver.interrupt()  # once only
    assert "got SIGINT" in lines, lines
    assert sum(line.startswith("rtk: stopping job (SIGINT") for line in lines) == 1
    driver.start()  # a later start does nothing
    assert driver.wait().status == "FAILED"
