"""rtk telemetry record's command, watched for stalls from its first step (real processes)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rank_processes import REPO, WAIT_FUNCTION

from toolkit.rundir import RunDir
from toolkit.stall.node_evidence import node_evidence
from toolkit.stall.records import NodeEvidence, read_stalls
from toolkit.stall.settings import STALL_EXIT, WatchSettings
from toolkit.telemetry.record_job import run_watched

# A rank that finishes two steps, then hangs in wait_here() (from rank_processes).
HANGS = f"""
import sys, time
sys.path.insert(0, {str(REPO)!r})
from toolkit import markers
for _ in range(2):
    markers.begin_step()
    markers.end_step(tokens=1)
def {WAIT_FUNCTION}():
    while True:
        time.sleep(3600)
{WAIT_FUNCTION}()
"""


def here(run_dir: str, per_node_timeout_s: float) -> list[NodeEvidence]:
    return [node_evidence(run_dir, os.uname().nodename, per_node_timeout_s / 5)]


def test_a_hung_command_is_named_and_stopped_with_abort(tmp_path: Path, capfd) -> None:  # type: ignore[no-untyped-def]
    settings = WatchSettings(policy="abort", timeout_s=2.0)
    os.environ["RTK_NODE"] = os.uname().nodename
    try:
        code = run_watched([sys.executable, "-c", HANGS], tmp_path, settings, here)
    finally:
        del os.environ["RTK_NODE"]
    assert code == STALL_EXIT
    (stall,) = read_stalls(RunDir(tmp_path).stall)
    assert stall.step == 1 and stall.action == "abort"
    ((rank,),) = [n.ranks for n in stall.nodes]
    assert any(f.function == WAIT_FUNCTION for f in rank.frames)
    out = capfd.readouterr().out
    assert "stalled at step 1 for" in out, out
    assert "rtk telemetry: --on-stall abort: stopping the job on every node" in out


def test_a_command_without_markers_is_never_called_stalled(tmp_path: Path, capfd) -> None:  # type: ignore[no-untyped-def]
    settings = WatchSettings(policy="abort", timeout_s=0.5, startup_timeout_s=0.5)
    command = [sys.executable, "-c", "import time; time.sleep(3); raise SystemExit(3)"]
    assert run_watched(command, tmp_path, settings, here) == 3
    assert not RunDir(tmp_path).stall.exists()
    assert "stall" not in capfd.readouterr().out
    # Without settings the command just runs.
    assert run_watched([sys.executable, "-c", "raise SystemExit(4)"], tmp_path, None) == 4


# A command that says when it got SIGTERM (a torchrun driver putting its limits back).
ENDS_ON_SIGTERM = """
import signal, sys, time
from pathlib import Path
def ended(signum, frame):
    Path(sys.argv[1]).write_text("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, ended)
Path(sys.argv[1] + ".ready").write_text("")
time.sleep(60)
"""


def test_a_signal_runs_before_abort_first_then_gives_the_command_its_sigterm(
    tmp_path: Path,
) -> None:
    """Not SIGKILL at once (as subprocess.run does): the command ends on its own terms."""
    import signal
    import threading
    import time

    said = tmp_path / "said"
    order: list[str] = []

    def interrupt() -> None:
        while not Path(f"{said}.ready").exists():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    command = [sys.executable, "-c", ENDS_ON_SIGTERM, str(said)]
    try:
        run_watched(command, tmp_path, None, before_abort=lambda: order.append("before"))
    except KeyboardInterrupt:
        order.append("interrupted")
    assert order == ["before", "interrupted"]
    assert said.read_text() == "SIGTERM"
