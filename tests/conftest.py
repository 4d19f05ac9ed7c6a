from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from toolkit.sandbox import Sandbox

REPO = Path(__file__).resolve().parents[1]

# A suite started as a background job of a non-interactive shell (`cmd &` in a CI
# script) inherits SIGINT ignored, and so would every rtk it starts: Python then never
# turns Ctrl-C into KeyboardInterrupt, and bash cannot trap a signal ignored at its
# start. The tests that press Ctrl-C need it delivered; a handler set here is reset to
# the default in each child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# CI runs the suite on several pytest-xdist workers (scripts/test.sh): most integration
# tests wait on Ray, SLURM and sshd rather than use a core. A worker takes a whole group
# of tests at a time. Tests that share something machine-wide are one group and so run
# on one worker, one after another: the session's ``sb3`` sandbox (and test_sandbox.py,
# which takes its names and subnet on purpose), the host's own Ray (``rtk up --local``,
# ``rtk demo``, ``ray.init`` clusters), and the SLURM sandboxes. Every other module is a
# group of its own; no two groups may use one sandbox name or subnet
# (tests/unit/test_test_groups.py).
XDIST_GROUPS: dict[str, str] = {
    "test_jobs_cluster": "sb3",
    "test_ray_cli_env": "sb3",
    "test_sandbox": "sb3",
    "test_ssh_cluster": "sb3",
    "test_tls_cluster": "sb3",
    "test_local_cluster": "host-ray",
    "test_packaging": "host-ray",
    "test_demo": "host-ray",
    "test_telemetry_session": "host-ray",
    "test_rank_files_cluster": "host-ray",
    "test_stall_collect": "host-ray",
    "test_sandbox_slurm": "slurm",
    "test_slurm_cluster": "slurm",
}


def xdist_group(path: Path) -> str:
    """The group of a test module: its shared resource, else the module itself."""
    if path.parent.name == "integration" and path.stem in XDIST_GROUPS:
        return XDIST_GROUPS[path.stem]
    return str(path.relative_to(REPO))


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's scope scheduler with a scope per group (its ``loadgroup`` marks do not
    reach the scheduler under pytest 9, whose node ids are no longer plain strings).

    Groups go out in the order of the collection, which ``pytest_collection_modifyitems``
    sorts longest first; xdist's own reordering (most tests first) is off: it sent the
    unit modules of hundreds of quick tests first and the 10-minute training module
    last, which then ran alone at the end of the run on one worker.
    """
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class ByGroup(LoadScopeScheduling):
        heavy: set[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(REPO / nodeid.split("::", 1)[0])

        totals: dict[str, float] = {}

        def _assign_work_unit(self, node: Any) -> None:
            if self.heavy is None:
                modules = [n.split("::", 1)[0] for n in self.collection or []]
                self.totals = group_seconds(modules, recorded_seconds())
                self.heavy = {g for g, sec in self.totals.items() if sec >= HEAVY_S}
            running = sum(
                1
                for other, work in self.assigned_work.items()
                if other is not node
                for scope, unit in work.items()
                if scope in self.heavy and not all(unit.values())
            )
            light = next_light(list(self.workqueue), self.heavy, running, self.totals)
            if light is not None:
                self.workqueue.move_to_end(light, last=False)
            super()._assign_work_unit(node)

    return ByGroup(config, log)


# A group of at least HEAVY_S recorded worker seconds is heavy (a module of training or
# SLURM runs): at most MAX_HEAVY_AT_ONCE of them run at once, the other workers taking
# light groups meanwhile. Three heavy groups at once held the load at 20-30 and failed
# two scenarios (CI run 18); two beside a light one kept the CPU busy where two alone
# both waited on their scenarios' timeouts (run 22: pytest 24.0 min on 3 workers,
# against 25.6 on 2).
HEAVY_S = 120.0
MAX_HEAVY_AT_ONCE = 2
# Light work kept back for the end: once no more than this is left in the queue, a
# worker takes the next heavy group even beside two others, or the heavy ones left
# would run alone at the end on one worker while the others had nothing to do (CI run
# 42: the last heavy group began at 15.2 min and ended the run at 18.0, the other two
# workers done at 15.6 and 16.1).
LIGHT_RESERVE_S = 360.0


def next_light(
    queue: list[str],
    heavy: set[str],
    heavy_running: int,
    seconds: dict[str, float] | None = None,
) -> str | None:
    """The group to hand out ahead of the queue's order: the first light one, when
    ``MAX_HEAVY_AT_ONCE`` heavy groups already run elsewhere and more light work than
    ``LIGHT_RESERVE_S`` (by ``seconds``, each group's expected) is left for the end;
    None: keep the order."""
    if heavy_running < MAX_HEAVY_AT_ONCE:
        return None
    light = [group for group in queue if group not in heavy]
    if not light:
        return None
    heavy_left = any(group in heavy for group in queue)
    light_s = sum((seconds or {}).get(group, 0.0) for group in light)
    if heavy_left and seconds is not None and light_s <= LIGHT_RESERVE_S:
        return None
    return light[0]


# Each test module's worker seconds in a recent CI run (scripts/test_times.py
# --write-seconds), read only to hand out the longest groups first. A stale or missing
# entry costs balance, never a result: a module it does not know counts, if
# integration, as the longest known (it goes out early, where a long one does no harm),
# else as nothing.
MODULE_SECONDS = REPO / "tests" / "module_seconds.json"


def group_seconds(modules: list[str], known: dict[str, float]) -> dict[str, float]:
    """Each group's expected worker seconds from its modules' (paths under the repo)."""
    longest_s = max(known.values(), default=0.0)
    totals: dict[str, float] = {}
    for module in dict.fromkeys(modules):
        if module in known:
            seconds = known[module]
        else:
            seconds = longest_s if module.startswith("tests/integration/") else 0.0
        group = xdist_group(REPO / module)
        totals[group] = totals.get(group, 0.0) + seconds
    return totals


def longest_groups_first(modules: list[str], known: dict[str, float]) -> list[str]:
    """The modules in the order their groups should start: longest group first, the
    collection's order kept within a group and between groups of equal length."""
    totals = group_seconds(modules, known)
    order = {
        group: i for i, group in enumerate(dict.fromkeys(xdist_group(REPO / m) for m in modules))
    }
    return sorted(
        dict.fromkeys(modules),
        key=lambda m: (-totals[xdist_group(REPO / m)], order[xdist_group(REPO / m)]),
    )


def recorded_seconds() -> dict[str, float]:
    """``MODULE_SECONDS`` as read (empty when missing or unreadable: order costs no result)."""
    import json

    try:
        return {str(k): float(v) for k, v in json.loads(MODULE_SECONDS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the longest groups first (see ``pytest_xdist_make_scheduler``)."""
    known = recorded_seconds()
    module_of = {id(item): str(item.path.relative_to(REPO)) for item in items}
    rank = {m: i for i, m in enumerate(longest_groups_first(list(module_of.values()), known))}
    items.sort(key=lambda item: rank[module_of[id(item)]])


# RTK_TEST_TIMELINE=FILE: each test's worker, start and end (wall seconds) and node id,
# a line each, appended there; scripts/test_times.py --timeline FILE shows each
# worker's groups in order and the CPU they left idle (JUnit has no start times).
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    start_s = time.time()
    yield
    path = os.environ.get("RTK_TEST_TIMELINE")
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{worker} {start_s:.2f} {time.time():.2f} {item.nodeid}\n")


# Hypothesis (tests/unit/properties/): "ci", the default everywhere, is CI's bounded
# budget: a fixed seed (derandomize), so every run tries the same cases and a failure
# reproduces; no example database. "long" (RTK_HYPOTHESIS_PROFILE=long) is the run by
# hand: fresh random cases, many more of them (hostile_input.examples scales each
# test's count), the failures kept in .hypothesis/ to be replayed first next time.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "long",
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("RTK_HYPOTHESIS_PROFILE", "ci"))

# A Ray client that lists the cluster's nodes through the dashboard; exit 1 when refused.
LIST_NODES = (
    "import sys\n"
    "from ray.util.state import list_nodes\n"
    "try:\n"
    "    print(len(list_nodes(address=sys.argv[1])))\n"
    "except Exception as e:\n"
    "    print(type(e).__name__, e); sys.exit(1)\n"
)


def require(condition: bool, why: str) -> None:
    """Skip when a testbed piece is missing here; in CI (CI=true) that is a failure."""
    if condition:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"testbed missing in CI: {why}")
    pytest.skip(why)


def rtk(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the rtk CLI as a user would, in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "toolkit", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        input=input,
        check=False,
    )


# Lines of a failed run's output that say why a process died (Ray's actor deaths,
# signals, the kernel's OOM killer, a crash), which the tail of a long log can hide
# behind the survivors' tracebacks.
_DEATH = re.compile(
    r"died|SIG[A-Z]+|signal|killed|out of memory|OutOfMemory|exit code|exited with|"
    r"terminate called|Segmentation|core dumped|Error:",
    re.IGNORECASE,
)


def failure_text(done: subprocess.CompletedProcess[str], tail_chars: int = 3000) -> str:
    """What an assertion on a failed rtk run prints: why processes died, then the tails."""
    seen: list[str] = []
    for line in (done.stdout + done.stderr).splitlines():
        short = line.strip()[:300]
        if _DEATH.search(short) and short not in seen:
            seen.append(short)
    return (
        "== why (first 40 distinct lines naming a death or an error)\n"
        + "\n".join(seen[:40])
        + f"\n== stdout tail\n{done.stdout[-tail_chars:]}\n== stderr tail\n{done.stderr[-tail_chars:]}"
    )


def interrupt_when(
    process: subprocess.Popen[str], ready: Callable[[], bool], deadline_s: float, what: str
) -> str:
    """Ctrl-C ``process`` (output piped, merged) once ``ready()``; what it printed.

    Fails if the process ends first or ``ready`` does not come within ``deadline_s``;
    the process is killed whatever happens.
    """
    try:
        deadline = time.monotonic() + deadline_s
        while not ready():
            assert process.poll() is None, (process.communicate()[0] or "")[-3000:]
            assert time.monotonic() < deadline, f"{what} did not come in {deadline_s:g} s"
            time.sleep(0.3)
        process.send_signal(signal.SIGINT)
        return process.communicate(timeout=120)[0] or ""
    finally:
        if process.poll() is None:
            process.kill()


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated rtk state directory for this test."""
    path = tmp_path / "state"
    monkeypatch.setenv("RTK_STATE_DIR", str(path))
    return path


@pytest.fixture(scope="session")
def ray_available() -> None:
    require(shutil.which("bash") is not None, "bash is needed")
    try:
        import ray  # noqa: F401
    except ImportError:
        require(False, "ray is not installed")


# Ray's background work that no test uses, off in the test clusters: the memory
# monitor (which would kill a worker when the whole shared machine runs low, a test
# failure with no cause in the test), metrics and event stats, and the idle workers a
# raylet prestarts for every driver. Measured on one tiny 10-step rtk train (3 nodes):
# 41 CPU-s against 44 with Ray's defaults.
RAY_TEST_QUIET: dict[str, str] = {
    "RAY_memory_monitor_refresh_ms": "0",
    "RAY_enable_metrics_collection": "0",
    "RAY_event_stats": "0",
    "RAY_prestart_worker_first_driver": "0",
    "RAY_enable_worker_prestart": "0",
}

# Ray's clocks for the test clusters: its GCS declares a node dead after
# health_check_failure_threshold checks in a row fail, one every health_check_period_ms,
# each given health_check_timeout_ms (Ray's defaults 5, 3,000 ms and 10,000 ms: 15 to
# 50 s). Tests that lose a node wait on that; here it takes 3 to 9 s. The timeout
# stays well above what a loaded 2-core machine makes a healthy raylet take to answer.
# Where scripts/test.sh built DeepSpeed's CPU comm op for the sandbox nodes' Ray
# workers, before the tests: they load it from there. Their default place
# (~/.cache/torch_extensions) holds a build for another venv's path, or another ninja's,
# and the first DeepSpeed run on a sandbox would compile it (a minute of one core).
_NODES_EXTENSIONS = os.environ.get("RTK_TEST_NODES_TORCH_EXTENSIONS_DIR")
BUILD_CACHES: dict[str, str] = (
    {"TORCH_EXTENSIONS_DIR": _NODES_EXTENSIONS} if _NODES_EXTENSIONS else {}
)

RAY_TEST_CLOCKS: dict[str, str] = {
    **RAY_TEST_QUIET,
    **BUILD_CACHES,
    "RAY_health_check_initial_delay_ms": "2000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "3000",
    "RAY_health_check_failure_threshold": "3",
    # Ray Train's controller polls its workers this often (2 s by default): it sees a
    # finished or failed worker group sooner; the job driver inherits it from Ray.
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
}


# The sandbox: a real 3-node cluster on this machine (see toolkit/sandbox), shared by
# every test that only needs one running; tests that create their own use other names.
def require_sandbox_host() -> None:
    """Skip (fail in CI) unless this machine can run sandboxes: Linux, root, the tools."""
    from toolkit.sandbox.hostcheck import find_tools

    require(sys.platform.startswith("linux"), "the sandbox needs Linux")
    require(os.geteuid() == 0, "the sandbox needs root (network namespaces, a bridge)")
    missing = find_tools()[1]
    require(not missing, f"the sandbox needs {', '.join(missing)} (scripts/system-packages.sh)")


@pytest.fixture(scope="session")
def sandbox3() -> Iterator[Sandbox]:
    """A running 3-node sandbox ``sb3`` on 10.77.3.0/24, removed at the end of the session."""
    from toolkit.sandbox import create, destroy

    require_sandbox_host()
    destroy("sb3")  # whatever an interrupted earlier session left behind
    sandbox = create(3, name="sb3", subnet="10.77.3", ray_env=RAY_TEST_CLOCKS)
    try:
        yield sandbox
    finally:
        sandbox.destroy()


@pytest.fixture(scope="module")
def sandbox_train() -> Iterator[Sandbox]:
    """A fresh 3-node sandbox ``sbt`` for the training tests alone, so they never meet
    what the bring-up tests (which kill Ray processes on purpose) leave on ``sb3``."""
    from toolkit.sandbox import create, destroy

    require_sandbox_host()
    destroy("sbt")
    # Ray declares a lost node dead within seconds here, and Ray Train ends the other
    # ranks sooner still: the cut-off-node scenario sees the watchdog name the node
    # (lost, or not answering), never the ranks Ray Train ended because of it.
    sandbox = create(3, name="sbt", subnet="10.77.7", ray_env=RAY_TEST_CLOCKS)
    try:
        yield sandbox
    finally:
        sandbox.destroy()


def pids_mentioning(text: str) -> list[int]:
    """Live (not zombie) processes whose command line contains ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text.encode() in cmdline and state != "Z":
            found.append(int(entry))
    return found
