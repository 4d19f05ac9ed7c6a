"""Stage ray-down: ``rtk down --local``, and no Ray process is left.

The runner runs it last whenever ray-up ran, whatever happened in between (a failed
stage, the time budget spent, an interrupt): the cluster never outlives the run. After
``rtk down``, ``pgrep`` must find no ``raylet`` and no ``gcs_server`` (waiting a few
seconds for them to exit).
"""

from __future__ import annotations

import time
from typing import Any

from gpu_acceptance.context import StageContext
from gpu_acceptance.stages.with_ray import common, figures

DAEMONS = ("raylet", "gcs_server")
EXIT_WAIT_S = 15.0


def commands(ctx: StageContext) -> list[list[str]]:
    """``rtk down``, then one ``pgrep`` per Ray daemon."""
    return [common.rtk(ctx, "down", "--local", "--json"), *(["pgrep", "-a", d] for d in DAEMONS)]


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    return (
        "stop the one-node cluster with rtk down --local (always, last, once ray-up ran) and "
        f"check with pgrep that no {' or '.join(DAEMONS)} process is left"
    )


def left_running(ctx: StageContext) -> list[str]:
    """The Ray daemons still running (``pgrep -a`` lines)."""
    found: list[str] = []
    for argv in commands(ctx)[1:]:
        found += figures.ray_processes(common.run(ctx, argv, 10.0).stdout)
    return found


def run(ctx: StageContext, io: Any) -> None:
    """Down, then look for what is left."""
    if not ctx.ray:
        raise io.skip(common.NO_RAY)
    done = common.run(ctx, commands(ctx)[0], 45.0)
    answer = common.json_object(done.stdout) or {}
    io.measure(
        "rtk_down",
        {**common.outcome(done), "stopped": answer.get("stopped"), "failed": answer.get("failed")},
    )
    if not done.ok:
        io.error(f"rtk down --local failed: {done.why()}")
    deadline = time.monotonic() + EXIT_WAIT_S
    left = left_running(ctx)
    while left and time.monotonic() < deadline:
        time.sleep(1.0)
        left = left_running(ctx)
    io.measure("ray_processes_left", left)
    if left:
        io.error(f"Ray processes left after rtk down: {'; '.join(left)[:600]}")
    io.summary("no Ray process left" if not left else f"{len(left)} Ray process(es) left")
