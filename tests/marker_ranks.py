"""Start a script's ranks as torchrun would (RANK, WORLD_SIZE, MASTER_ADDR...), for the
marker tests, and read what each rank wrote."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from conftest import REPO

from toolkit.rundir import Marker, read_markers

# torch 2.13's gloo ranks sometimes abort as the interpreter exits, after the script
# has ended (its process group destroyed): this line on stderr and SIGABRT. Seen in 8
# of 16 runs of a plain script without rtk beside two busy processes, and in CI. Every
# marker is written by then: the tests check the markers, and take this exit as ended.
TORCH_EXIT_ABORT = "terminate called without an active exception"


def ended_well(done: subprocess.CompletedProcess[str]) -> bool:
    """The rank exited 0, or only torch's abort at interpreter exit ended it."""
    return done.returncode == 0 or (
        done.returncode == -signal.SIGABRT and TORCH_EXIT_ABORT in done.stderr
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def python_env(run_dir: Path | None, **extra: str) -> dict[str, str]:
    """This environment with rtk importable, markers on for ``run_dir`` (off for None)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RTK_", "RANK", "WORLD"))}
    env.pop("LOCAL_RANK", None)
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", **extra)
    if run_dir is not None:
        env["RTK_RUN_DIR"] = str(run_dir)
    return env


def run_ranks(
    argv: Sequence[str], world_size: int, run_dir: Path | None, cwd: Path, timeout_s: float = 60
) -> list[subprocess.CompletedProcess[str]]:
    """Run ``python ARGV`` once per rank, with torchrun's environment; wait for all."""
    port = str(free_port())
    ranks = [
        subprocess.Popen(
            [sys.executable, *argv],
            cwd=cwd,
            env=python_env(
                run_dir,
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(world_size),
                LOCAL_WORLD_SIZE=str(world_size),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world_size)
    ]
    done = []
    for process in ranks:
        out, err = process.communicate(timeout=timeout_s)
        done.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return done


def by_rank(run_dir: Path) -> Mapping[int, list[Marker]]:
    """Every rank's markers, in file order."""
    found: dict[int, list[Marker]] = {}
    for marker in read_markers(run_dir):
        found.setdefault(marker.rank, []).append(marker)
    return found


def events(markers: Sequence[Marker]) -> list[tuple[str, int | None]]:
    """(event, step) of each marker, with a phase's name: ``phase_begin:backward``."""
    return [
        (f"{m.event}:{m.fields['name']}" if m.event.startswith("phase_") else m.event, m.step)
        for m in markers
    ]
