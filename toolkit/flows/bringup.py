"""Bring-up and preflight under a ``PreflightPolicy``: the cluster steps of every flow."""

from __future__ import annotations

import dataclasses

from toolkit.cluster import StateStore, up
from toolkit.cluster.plan import ClusterPlan
from toolkit.cluster.report import Reporter
from toolkit.flows.outcome import (
    BringUpOutcome,
    PreflightFailedError,
    PreflightOutcome,
    PreflightPolicy,
)
from toolkit.preflight.runner import run_preflight, save_in_run_dir
from toolkit.rundir import RunDir
from toolkit.transport.base import Transport


def bring_up(
    plan: ClusterPlan,
    transport: Transport,
    store: StateStore,
    reporter: Reporter,
    policy: PreflightPolicy,
    rotate: bool = False,
) -> BringUpOutcome:
    """Start Ray on every node, then run the fast checks unless ``policy`` skips them.

    ``rotate``: new credentials first (``cluster.rotate``; refused on a running cluster).

    Raises:
        PreflightFailedError: A check failed and ``policy`` enforces them (the cluster
            stays up; the error carries the outcome).
    """
    result = up(plan, transport, store, reporter, rotate=rotate)
    if policy is PreflightPolicy.SKIP:
        return BringUpOutcome(result, PreflightOutcome(policy))
    reporter.info("preflight checks (--no-preflight skips them)")
    # Nodes left out (min_nodes allows it) were already reported by up.
    left_out = {o.name for o in result.nodes if o.action == "failed"}
    joined = tuple(n for n in plan.nodes if n.name not in left_out)
    # up has just asked Ray which nodes are alive: no second status round trip.
    alive = {n.name for n in result.status.nodes if n.alive} if result.status else None
    report = run_preflight(dataclasses.replace(plan, nodes=joined), transport, alive=alive)
    outcome = BringUpOutcome(result, PreflightOutcome(policy, report))
    if outcome.preflight.failed and policy is PreflightPolicy.ENFORCE:
        raise PreflightFailedError(
            f"cluster {plan.inventory.name} is up, but preflight failed",
            outcome.preflight,
            outcome,
        )
    return outcome


def preflight(
    plan: ClusterPlan,
    transport: Transport,
    run_dir: str,
    policy: PreflightPolicy,
    save: bool = True,
) -> PreflightOutcome:
    """The fast checks for a run writing to ``run_dir``, kept there as preflight.json.

    With ``save`` False nothing is written (``run_dir`` only names where the free-disk
    check looks).

    Raises:
        PreflightFailedError: A check failed and ``policy`` enforces them.
        ClusterError: preflight.json could not be written on the head.
    """
    if policy is PreflightPolicy.SKIP:
        return PreflightOutcome(policy)
    report = run_preflight(plan, transport, run_dir)
    saved_to = None
    if save:
        save_in_run_dir(plan, transport, run_dir, report)
        saved_to = f"{run_dir}/{RunDir(run_dir).preflight.name}"  # as the head names it
    outcome = PreflightOutcome(policy, report, saved_to)
    if outcome.failed and policy is PreflightPolicy.ENFORCE:
        raise PreflightFailedError("preflight failed", outcome)
    return outcome
