"""MarkerWriter's stack dumps on request (faulthandler on SIGUSR2): in real child processes.

Registration is once per process, so each case runs in a Python child of its own
that writes markers, then is sent ``STACK_SIGNAL`` (or forks) and says what it saw.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import REPO

from toolkit.rundir import RunDir
from toolkit.rundir.markers import (
    STACK_SIGNAL,
    MarkerFollower,
    Registration,
    catches_signal,
    registration,
    registration_line,
    registrations,
)

PRELUDE = """\
import os, signal, sys, time
from pathlib import Path
from toolkit.rundir.markers import MarkerWriter
from toolkit.rundir.markers import STACK_SIGNAL, catches_signal
run_dir = Path(sys.argv[1])
"""


def run_child(body: str, run_dir: Path) -> list[str]:
    """Run ``body`` after ``PRELUDE`` in a child Python; its stdout's lines."""
    script = PRELUDE + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(run_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def dumps_in(path: Path) -> int:
    return path.read_text().count("Current thread")


def test_the_signal_dumps_every_thread_and_the_process_goes_on(tmp_path: Path) -> None:
    out = run_child(
        """
        writer = MarkerWriter(run_dir, rank=2, local_rank=0, world_size=4)
        MarkerWriter(run_dir, rank=3, local_rank=1, world_size=4)  # registered once only
        os.kill(os.getpid(), STACK_SIGNAL)
        time.sleep(0.2)
        writer.write("step_end", 1)
        print("alive", catches_signal("self", STACK_SIGNAL))
        """,
        tmp_path,
    )
    assert out == ["alive True"]
    dump = tmp_path / "stacks" / "rank-2.txt"
    assert dumps_in(dump) == 1 and " in <module>" in dump.read_text()
    assert not (tmp_path / "stacks" / "rank-3.txt").exists()
    (found,) = registrations(dump.read_text())
    assert found.pid > 0 and registration(dump, found.pid) == found


def test_a_handler_there_before_is_still_called(tmp_path: Path) -> None:
    out = run_child(
        """
        signal.signal(signal.SIGUSR2, lambda *_: print("the user's handler ran", flush=True))
        MarkerWriter(run_dir, rank=0, local_rank=0, world_size=1)
        os.kill(os.getpid(), STACK_SIGNAL)
        time.sleep(0.2)
        print("alive")
        """,
        tmp_path,
    )
    assert out == ["the user's handler ran", "alive"]
    assert dumps_in(tmp_path / "stacks" / "rank-0.txt") == 1


def test_a_forked_child_is_as_it_would_be_without_rtk(tmp_path: Path) -> None:
    out = run_child(
        """
        MarkerWriter(run_dir, rank=0, local_rank=0, world_size=1)
        child = os.fork()
        if child == 0:
            # A DataLoader worker: the default action again, nothing into the parent's file.
            print("child catches", catches_signal("self", STACK_SIGNAL), flush=True)
            os._exit(0)
        os.waitpid(child, 0)
        print("parent catches", catches_signal("self", STACK_SIGNAL), flush=True)
        """,
        tmp_path,
    )
    assert out == ["child catches False", "parent catches True"]
    assert len(registrations((tmp_path / "stacks" / "rank-0.txt").read_text())) == 1


def test_a_failure_to_register_never_stops_the_markers(tmp_path: Path) -> None:
    (tmp_path / "stacks").write_text("a file where the folder would be\n")
    out = run_child(
        """
        writer = MarkerWriter(run_dir, rank=0, local_rank=0, world_size=1)
        writer.write("step_end", 1)
        print("catches", catches_signal("self", STACK_SIGNAL))
        """,
        tmp_path,
    )
    assert out == ["catches False"]
    assert (tmp_path / "markers" / "rank-00000.jsonl").read_text().count("step_end") == 1


def test_registration_lines_are_read_back() -> None:
    text = (
        registration_line(10, 111)
        + "Current thread 0x0000000000000001 (most recent call first):\n"
        + registration_line(12, 222)
        + registration_line(10, 333)
    )
    assert registrations(text) == [
        Registration(10, 111),
        Registration(12, 222),
        Registration(10, 333),
    ]
    assert STACK_SIGNAL == signal.SIGUSR2
    assert registration(Path("/nonexistent/stacks.txt"), 10) is None


def test_another_processs_handlers_are_read_from_the_kernel() -> None:
    script = "import time; print('ready', flush=True); time.sleep(600)"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        assert catches_signal(child.pid, STACK_SIGNAL) is False
        assert catches_signal(child.pid, signal.SIGINT) is True  # Python's KeyboardInterrupt
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert catches_signal(child.pid, STACK_SIGNAL) is None  # gone: not known


def test_the_follower_reads_only_complete_new_lines(tmp_path: Path) -> None:
    path = RunDir(tmp_path).marker(0)
    path.parent.mkdir(parents=True)
    line = {"event": "step_end", "step": 3, "wall_s": 10.0, "rank": 0, "node": "n0"}
    path.write_text(json.dumps(line) + "\n" + '{"event": "step_end", "st')
    follower = MarkerFollower(tmp_path)
    (first,) = follower.poll()
    assert (first.event, first.step, first.rank, first.node) == ("step_end", 3, 0, "n0")
    assert follower.poll() == []  # the partial line waits
    with path.open("a") as f:
        f.write('ep": 4, "wall_s": 11.0, "rank": 0, "node": "n0"}\n')
        f.write(
            json.dumps(
                {"event": "phase_begin", "name": "ckpt", "wall_s": 12.0, "rank": 0, "node": "n0"}
            )
            + "\n"
        )
        f.write(
            json.dumps({"event": "barrier", "step": 4, "wall_s": 12.5, "rank": 0, "node": "n0"})
            + "\n"
        )
    assert [(p.event, p.step, p.phase) for p in follower.poll()] == [
        ("step_end", 4, None),
        ("phase_begin", None, "ckpt"),
    ]
    assert follower.rank_nodes == {0: "n0"}
