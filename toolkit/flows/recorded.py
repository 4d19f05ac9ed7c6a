"""A workload run under telemetry, brought here and reported.

The flow of ``rtk telemetry record`` and ``rtk torchrun`` (``rtk train`` walks its own
plan). No preflight of its own, and a run stopped with Ctrl-C still has what it recorded
brought here and reported: without a shared filesystem it would stay on the head.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from toolkit.flows.outcome import PreflightPolicy
from toolkit.flows.run import RunEvents, RunResult, execute
from toolkit.flows.session import Session
from toolkit.inventory import Inventory
from toolkit.workloads import Workload

# Refuses what is wrong before the run starts: (session, dry_run) -> None or raises.
RunCheck = Callable[[Session, bool], None]


def default_run_id(inventory: Inventory) -> str:
    """A run's id when --run-id is not given: the cluster's name and the time."""
    return f"{inventory.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def run_recorded(
    inventory: Inventory,
    workload: Workload,
    events: RunEvents,
    log: Callable[[str], None],
    check: RunCheck | None = None,
    show_plan: Callable[[str], None] | None = None,
) -> RunResult | None:
    """Run ``workload`` under telemetry on ``inventory``'s cluster and report it.

    With ``show_plan`` (``--dry-run``) the plan's text goes there instead and nothing
    runs (None). ``check`` runs first either way.
    """
    with Session(inventory, log=log) as session:
        if check is not None:
            check(session, show_plan is not None)
        plan = session.run_plan(workload, PreflightPolicy.SKIP, collect_after_interrupt=True)
        if show_plan is not None:
            show_plan(plan.render())
            return None
        return execute(session, plan, workload, events)
