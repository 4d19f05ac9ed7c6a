"""How the Ray stages run rtk's commands: their command lines, environment and time.

Every command line a Ray stage runs is built here or by the stage's ``commands``
(pure functions of the context), so ``--dry-run`` and the CPU mode list exactly what a
GPU run would start. ``shown`` writes one for people: the Python as ``python`` and
the scratch directory as ``$WORK``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpu_acceptance import procs
from gpu_acceptance.context import StageContext

NO_RAY = "Ray not importable"
# The user's script of ray-record and ray-torchrun: imports nothing of rtk.
PLAIN_TORCH = Path(__file__).resolve().parents[2] / "plain_torch.py"
ROOT_ONLY = "needs root: rtk profile sets GPU power limits (as nvidia-smi -pl does)"


def rtk(ctx: StageContext, *args: str) -> list[str]:
    """``rtk ARGS`` as the run's Python runs it."""
    return [ctx.python, "-m", "toolkit", *args]


def env(ctx: StageContext) -> dict[str, str]:
    """The stages' environment with the run's Python's ``bin`` first on ``PATH``.

    There the ``ray`` command is (the venv's, or where the Ray archive put it), and a
    job's ``python`` is the cluster's.
    """
    path = os.environ.get("PATH", "")
    return ctx.env(PATH=os.pathsep.join([str(Path(ctx.python).parent), path]))


def run(ctx: StageContext, argv: Sequence[str], timeout_s: float) -> procs.Done:
    """Run one command of a Ray stage in the repository, bounded by ``timeout_s``."""
    return procs.run(argv, timeout_s, env=env(ctx), cwd=ctx.repo)


def shown(ctx: StageContext, argv: Sequence[str]) -> str:
    """``argv`` as a shell line, the Python as ``python`` and the scratch dir as ``$WORK``."""
    words = [a.replace(ctx.python, "python") for a in argv]
    line = shlex.join(words)
    return line.replace(ctx.work.rstrip("/"), "$WORK") if ctx.work else line


def fresh_job(job_dir: Path, script: Path, run_dir: Path) -> None:
    """A job directory holding ``script`` alone, and no run directory left from before."""
    shutil.rmtree(job_dir, ignore_errors=True)
    job_dir.mkdir(parents=True)
    shutil.copy(script, job_dir / script.name)
    shutil.rmtree(run_dir, ignore_errors=True)


def outcome(done: procs.Done, tail_chars: int = 1500) -> dict[str, Any]:
    """A command's exit status, time and the end of its output, for the record."""
    text = (done.stdout.strip() + "\n" + done.stderr.strip()).strip()
    return {
        "rc": done.rc,
        "seconds": round(done.duration_s, 2),
        "timed_out": done.timed_out,
        "tail": procs.tail(text, tail_chars),
    }


def json_object(text: str) -> dict[str, Any] | None:
    """The JSON object a command printed (from its first ``{`` on); None when there is none."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        data = json.loads(text[start:])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


class Deadline:
    """What is left of a stage's time, less a reserve kept for what must run last.

    ``total_s`` is the runner's limit for the stage (``StageContext.stage_timeout_s``;
    0: none given, and ``fallback_s`` is used).
    """

    def __init__(self, total_s: float, reserve_s: float = 0.0, fallback_s: float = 600.0) -> None:
        self.end = time.monotonic() + (total_s if total_s > 0 else fallback_s) - reserve_s

    def left_s(self) -> float:
        """Seconds left before the reserve."""
        return self.end - time.monotonic()

    def cap(self, timeout_s: float) -> float:
        """``timeout_s``, or less when less is left (never below 1 s)."""
        return max(1.0, min(timeout_s, self.left_s()))
