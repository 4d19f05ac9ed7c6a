"""Stage ray-up: ``rtk up --local``, and Ray registers the GPUs.

``rtk up --local --json`` brings this machine up as a one-node cluster (its fast
preflight after); ``rtk status --json`` must list the node alive with as many GPU
resources as NVML found; ``ray status``, Ray's own command in a bash that evaluated
``rtk env --local --export``, must reach the cluster and count the same GPUs.
Whether the cluster came up (``cluster_up``) decides whether the later Ray stages run,
even when a preflight check failed.
"""

from __future__ import annotations

import shlex
import time
from typing import Any

from gpu_acceptance.context import StageContext
from gpu_acceptance.stages.with_ray import common, figures

STATUS_TRIES = 10  # ray status, until it lists the cluster's resources
STATUS_WAIT_S = 2.0


def commands(ctx: StageContext) -> list[list[str]]:
    """``rtk up``, ``rtk status``, and ``ray status`` in the exported environment."""
    export = shlex.join(common.rtk(ctx, "env", "--local", "--export", "--shell", "bash"))
    return [
        common.rtk(ctx, "up", "--local", "--json"),
        common.rtk(ctx, "status", "--local", "--json"),
        ["bash", "-c", f'eval "$({export})" && ray status'],
    ]


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    return (
        "bring this machine up as a one-node Ray cluster (rtk up --local), check that "
        "rtk status --json lists its GPUs as Ray resources and that ray status works "
        "in a bash that evaluated rtk env --export"
    )


def run(ctx: StageContext, io: Any) -> None:
    """Up, status, ray status."""
    if not ctx.ray:
        raise io.skip(common.NO_RAY)
    up_argv, status_argv, ray_status_argv = commands(ctx)
    deadline = common.Deadline(ctx.stage_timeout_s, reserve_s=5.0)
    up = common.run(ctx, up_argv, deadline.cap(75.0))
    answer = common.json_object(up.stdout) or {}
    preflight = answer.get("preflight") or {}
    io.measure(
        "rtk_up",
        {
            **common.outcome(up),
            "started": answer.get("started"),
            "duration_s": answer.get("duration_s"),
            "preflight_status": preflight.get("status"),
        },
    )
    for check in preflight.get("checks") or []:
        if check.get("status") == "fail":
            io.error(f"rtk up's preflight: {check.get('name')} failed: {check.get('measured')}")
    if not up.ok and not answer:
        io.error(f"rtk up --local failed: {up.why()}")
    status = common.run(ctx, status_argv, deadline.cap(30.0))
    seen = figures.status_gpus(common.json_object(status.stdout) or {})
    io.measure("rtk_status", {**seen, "rc": status.rc})
    io.measure("cluster_up", bool(seen["alive"]))
    if not seen["alive"]:
        io.error(f"rtk status lists no node alive: {seen['error'] or status.why()}")
        return
    if seen["gpus"] != float(len(ctx.gpus)):
        io.error(f"Ray registered {seen['gpus']:g} GPU(s); NVML found {len(ctx.gpus)}")
    # Right after the head starts, ray status may answer "No cluster status" until
    # Ray's monitor has reported once (seen on the first GPU machine): ask again.
    shell = common.run(ctx, ray_status_argv, deadline.cap(30.0))
    counted = figures.ray_status_gpus(shell.stdout)
    asked = 1
    while shell.ok and counted is None and asked < STATUS_TRIES and deadline.left_s() > 5:
        time.sleep(STATUS_WAIT_S)
        shell = common.run(ctx, ray_status_argv, deadline.cap(30.0))
        counted = figures.ray_status_gpus(shell.stdout)
        asked += 1
    io.measure("ray_status", {**common.outcome(shell, 2500), "gpus": counted, "asked": asked})
    if not shell.ok:
        io.error(f"ray status in the exported environment failed: {shell.why()}")
    elif counted != seen["gpus"]:
        io.error(f"ray status counts {counted} GPU(s), rtk status {seen['gpus']:g}")
    io.summary(
        f"{len(seen['alive'])} node alive, {seen['gpus']:g} GPU(s) in Ray "
        f"{seen['ray_version']}; ray status: {'ok' if shell.ok else 'failed'}, "
        f"{counted if counted is not None else '?'} GPU(s)"
    )
