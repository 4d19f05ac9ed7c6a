"""``rtk stall-check``: what it asks the cluster, which run it names, what it prints and exits.

No cluster here: a dry run shows the job; the check itself runs as the job would,
its ``check`` called on the request's own options with every node's evidence given
(``Session.run_request`` stands in for the Jobs API, feeding the job's lines to the
command as Ray streams them), and the Jobs API is seen to be reached (exit 6 at the
missing token).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import REPO

from toolkit.cli import cli, main
from toolkit.cli.options.stall_options import run_dir_of
from toolkit.flows import Session
from toolkit.jobs.client import JobOutcome
from toolkit.jobs.request import JobRequest
from toolkit.rundir import RunDir
from toolkit.rundir.markers import Marker
from toolkit.stall.check_job import check
from toolkit.stall.records import STOPPED, NodeEvidence, RankEvidence, read_stalls
from toolkit.stall.settings import CHECK_MODULE, CHECK_PREFIX, CheckOptions
from toolkit.state.cluster_state import RecordedRun
from toolkit.state.store import StateStore
from toolkit.train.job_spec import remember_run

INVENTORY = """\
cluster: sctest
nodes:
  - host: n1
    address: 10.9.0.1
  - host: n2
    address: 10.9.0.2
"""
T0 = 1.7e9


@pytest.fixture
def inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RTK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("RTK_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    return path


def rtk(*args: str) -> Result:
    return CliRunner().invoke(cli, ["stall-check", *args])


def exits(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``rtk stall-check ARGS`` as ``main`` runs it: exit status, stdout, stderr."""
    code = 0
    try:
        main(args=["stall-check", *args])
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def job_options(request: JobRequest) -> CheckOptions:
    """The options the job gets, read back from its entrypoint as the head runs it."""
    argv = shlex.split(request.entrypoint)
    assert argv[1:3] == ["-m", CHECK_MODULE]
    return CheckOptions.from_json(json.loads(argv[3]))


def dry_run_dir(*args: str) -> str:
    done = rtk(*args, "--dry-run")
    assert done.exit_code == 0, done.output
    line = next(line for line in done.output.splitlines() if "entrypoint:" in line)
    return str(json.loads(shlex.split(line.split("entrypoint:", 1)[1])[3])["run_dir"])


Collector = Callable[[str, float], list[NodeEvidence]]


def the_job_runs_here(monkeypatch: pytest.MonkeyPatch, collector: Collector) -> None:
    """Requests run the check job's own ``check`` here, its lines streamed as Ray would."""

    def run_request(self: Session, request: JobRequest, renumber: bool = True) -> JobOutcome:
        self.log("2026-01-01 12:00:00 INFO worker.py -- Connecting to existing Ray cluster")
        code = check(
            job_options(request),
            lambda line: self.log(CHECK_PREFIX + line),
            collector,
            clock=lambda: T0 + 100.0,
            out=self.log,
        )
        status, message = ("SUCCEEDED", "") if code == 0 else ("FAILED", f"exit code {code}")
        return JobOutcome(request.submission_id, status, 1.0, message)

    monkeypatch.setattr(Session, "run_request", run_request)


def write_run(run_dir: Path) -> None:
    """Two ranks on n1 and n2 that finished step 7 at T0 + 16 s, steps of 2 s."""
    layout = RunDir(run_dir)
    layout.markers_dir.mkdir(parents=True)
    for rank, node in ((0, "n1"), (1, "n2")):
        lines = [
            Marker("step_end", step, T0 + 2.0 * (step + 1), 1.0, node, node, rank, rank, 2, None, 9)
            for step in range(8)
        ]
        layout.marker(rank).write_text("".join(json.dumps(m.to_json()) + "\n" for m in lines))


def stopped_rank_1(run_dir: str, per_node_timeout_s: float) -> list[NodeEvidence]:
    return [
        NodeEvidence("n1", (RankEvidence(0, "n1", pid=10, state="sleeping", last_step=7),)),
        NodeEvidence("n2", (RankEvidence(1, "n2", pid=11, state=STOPPED, last_step=7),)),
    ]


def test_the_help_says_what_when_how_and_the_exit_codes() -> None:
    text = " ".join(rtk("--help").output.split())
    for words in (
        "Where each rank of a slow or stuck run is, now, and which ranks hold it up.",
        "stall-check does it when asked",
        "RUN is the run directory as the nodes see it",
        "a bare run id: the run rtk train last started with that id, else ~/rtk-runs/RUN_ID",
        "rtk stall-check inv.yaml mycluster-20260101-120000",
        "--json prints that record",
        "Exits 0 when the check ran (whatever it found), 1 when it could not",
        "--per-node-timeout-s SECONDS",
        "--dry-run",
    ):
        assert words in text, words


def test_the_top_level_help_lists_it() -> None:
    assert "rtk stall-check inv.yaml RUN" in CliRunner().invoke(cli, ["--help"]).output


def test_a_dry_run_prints_the_job_and_touches_nothing(inventory: Path, tmp_path: Path) -> None:
    done = rtk(str(inventory), "r1", "--per-node-timeout-s", "30", "--json", "--dry-run")
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert lines[0].startswith("stall-check job rtk-stall-check-r1-")
    assert " via http://10.9.0.1:" in lines[0]  # the head's Jobs API
    entrypoint = shlex.split(lines[1].removeprefix("  entrypoint: "))
    assert entrypoint[1:3] == ["-m", CHECK_MODULE]  # on the head's Python
    assert json.loads(entrypoint[3]) == {
        "run_dir": "~/rtk-runs/r1",
        "per_node_timeout_s": 30.0,
        "json": True,
    }
    assert "  run directory: ~/rtk-runs/r1" in lines
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        ("r1", "~/rtk-runs/r1"),
        ("~/elsewhere/r1", "~/elsewhere/r1"),
        ("/scratch/runs/r1", "/scratch/runs/r1"),
        ("runs/r1", "{cwd}/runs/r1"),
        (".", "{cwd}"),
        (".hidden", "~/rtk-runs/.hidden"),  # a run id may begin with a dot
    ],
)
def test_run_names_a_path_or_a_run_id(inventory: Path, run: str, expected: str) -> None:
    assert dry_run_dir(str(inventory), run) == expected.format(cwd=os.getcwd())


def test_a_run_id_rtk_train_recorded_is_its_directory(inventory: Path) -> None:
    store = StateStore("sctest")
    remember_run(store, "r7", "/scratch/runs/r7")
    remember_run(store, "r8", "/scratch/runs/r8")
    assert dry_run_dir(str(inventory), "r7") == "/scratch/runs/r7"
    assert dry_run_dir(str(inventory), "r9") == "~/rtk-runs/r9"
    again = [RecordedRun("r7", "/old/r7", 1.0), RecordedRun("r7", "/new/r7", 2.0)]
    assert run_dir_of("r7", again) == "/new/r7"


def test_with_local_a_lone_word_is_the_run(inventory: Path) -> None:
    assert dry_run_dir("--local", "r1") == "~/rtk-runs/r1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{inv}"], "give the RUN to check: its run directory as the nodes see it, or its run id"),
        (["{inv}", "r1", "--per-node-timeout-s", "0"], "Invalid value for '--per-node-timeout-s'"),
        (["{inv}", " "], "give a run directory or a run id"),
    ],
)
def test_usage_errors(inventory: Path, args: list[str], message: str) -> None:
    done = rtk(*[a.format(inv=inventory) for a in args])
    assert done.exit_code == 2
    assert message in " ".join(done.output.split()), done.output


def test_a_check_prints_one_screen_naming_the_stopped_rank(
    inventory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    write_run(tmp_path / "run")
    the_job_runs_here(monkeypatch, stopped_rank_1)
    code, out, err = exits(capsys, str(inventory), str(tmp_path / "run"))
    assert (code, err) == (0, ""), err
    lines = out.splitlines()
    assert lines[0] == (
        "step 7 finished 84 s ago; recent steps took 2 s (median); asking every node for "
        "its ranks' stacks (each within 10 s)"
    )
    assert lines[1].startswith(
        "stalled at step 7 for 84 s: rank 1 (n2) is stopped (SIGSTOP or a debugger);"
    )
    assert "  rank 1 (n2) is stopped (SIGSTOP or a debugger)" in lines
    assert lines[-1] == f"every rank's stack: {tmp_path / 'run' / 'stall.json'}"
    assert "Ray" not in out
    (kept,) = read_stalls(RunDir(tmp_path / "run").stall)
    assert (kept.action, kept.step, kept.stalled_s, kept.timeout_s) == ("check", 7, 84.0, 0.0)


def test_json_prints_the_record_alone_on_stdout(
    inventory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    write_run(tmp_path / "run")
    the_job_runs_here(monkeypatch, stopped_rank_1)
    code, out, err = exits(capsys, str(inventory), str(tmp_path / "run"), "--json")
    assert code == 0, err
    (kept,) = read_stalls(RunDir(tmp_path / "run").stall)
    assert json.loads(out) == kept.to_json()
    assert json.loads(out)["suspects"][0] == {
        "rank": 1,
        "node": "n2",
        "reason": "stopped (SIGSTOP or a debugger)",
        "frame": None,
    }
    assert "stalled at step 7 for 84 s" in err  # the screen, beside


def test_a_run_the_head_does_not_have_is_one_line_and_exit_1(
    inventory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    the_job_runs_here(monkeypatch, stopped_rank_1)
    code, out, err = exits(capsys, str(inventory), str(tmp_path / "nowhere"))
    assert (code, out) == (1, "")
    (line,) = err.splitlines()
    assert line.startswith(
        f"rtk: cannot check {tmp_path / 'nowhere'}: no such directory on the head"
    )


def test_a_job_that_failed_says_so_and_where_its_log_is(
    inventory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    def run_request(self: Session, request: JobRequest, renumber: bool = True) -> JobOutcome:
        self.log("Traceback (most recent call last):")
        return JobOutcome("rtk-stall-check-r1-1", "FAILED", 3.0, "exit code 1")

    monkeypatch.setattr(Session, "run_request", run_request)
    code, out, err = exits(capsys, str(inventory), "r1")
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "rtk: the stall-check job rtk-stall-check-r1-1 ended FAILED: exit code 1; "
        f"rtk logs {inventory} rtk-stall-check-r1-1 shows its log"
    ]


def test_a_cluster_never_brought_up_from_here_is_one_line(inventory: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "toolkit", "stall-check", str(inventory), "r1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 6, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"rtk: no token for cluster sctest on this machine ({os.environ['RTK_STATE_DIR']}"
        "/sctest/auth_token); bring it up with rtk up from here"
    ]
