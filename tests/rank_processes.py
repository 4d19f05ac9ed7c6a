"""Real rank processes for the stall tests: each writes markers, then waits at a known line.

A rank here is a Python child that writes its markers through ``toolkit.markers``
(``RTK_RUN_DIR``, ``RANK``, ``RTK_NODE`` set as rtk sets them): a step, then a step
begun with the ``forward`` phase open, and then it waits forever in ``wait_here``
(``WAIT_LINE``), asleep, so it costs no CPU. ``Ranks`` starts them, returns once the
kernel says a rank sleeps (it is then in that line: nothing else it does blocks), and
kills every one it started.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RANK_SCRIPT = """\
import sys
import time

from toolkit import markers

markers.begin_step()
markers.end_step(tokens=1)
markers.begin_step()
markers.begin_phase("forward")


def wait_here():
    print("ready", flush=True)
    if "--exit" in sys.argv:
        return
    while True:
        time.sleep(3600)  # the rank waits here


wait_here()
"""
WAIT_LINE = next(
    n for n, line in enumerate(RANK_SCRIPT.splitlines(), 1) if "the rank waits here" in line
)
WAIT_FUNCTION = "wait_here"
READY_TIMEOUT_S = 60.0


class Ranks:
    """Rank processes of one run directory; ``kill_all`` ends every one."""

    def __init__(self, run_dir: Path, script_dir: Path) -> None:
        self.run_dir = run_dir
        self.script = script_dir / "rank.py"
        self.script.write_text(RANK_SCRIPT)
        self.started: list[subprocess.Popen[str]] = []

    def start(self, rank: int, node: str = "node-a", exit_after: bool = False) -> int:
        """Start rank ``rank`` on ``node``; returns its pid once it is waiting (or has ended)."""
        env = {
            **os.environ,
            "RTK_RUN_DIR": str(self.run_dir),
            "RTK_NODE": node,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank % 8),
            "WORLD_SIZE": "8",
            "PYTHONPATH": str(REPO),
        }
        args = [sys.executable, str(self.script), *(["--exit"] if exit_after else [])]
        process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)
        self.started.append(process)
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], READY_TIMEOUT_S)
        assert ready and process.stdout.readline() == "ready\n", f"rank {rank} did not start"
        if exit_after:
            assert process.wait(timeout=READY_TIMEOUT_S) == 0
        else:
            wait_for_state(process.pid, "S")
        return process.pid

    def stop(self, pid: int) -> None:
        """SIGSTOP ``pid`` and wait until the kernel says it is stopped."""
        os.kill(pid, signal.SIGSTOP)
        wait_for_state(pid, "T")

    def kill_all(self) -> None:
        """Kill every rank started (a stopped one too) and reap it."""
        for process in self.started:
            if process.poll() is None:
                process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()


def wait_for_state(pid: int, letter: str) -> None:
    """Wait until ``/proc/PID/stat`` shows state ``letter`` (a minute at most)."""
    for _ in range(6000):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rpartition(")")[2].split()[0] == letter:
            return
        select.select([], [], [], 0.01)
    raise AssertionError(f"pid {pid} never reached state {letter}")
