"""Bring-up and preflight under a ``PreflightPolicy``: the cluster steps of every flow."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from toolkit.cluster.plan import ClusterPlan
from toolkit.cluster.progress_reporter import Reporter
from toolkit.flows.outcome import (
    BringUpOutcome,
    PreflightFailedError,
    PreflightOutcome,
    PreflightPolicy,
)
from toolkit.lifecycle.start import up
from toolkit.preflight.result import PreflightReport
from toolkit.preflight.runner import run_preflight, save_in_run_dir
from toolkit.rundir import RunDir
from toolkit.state.store import StateStore
from toolkit.transport.base import Transport


def bring_up(
    plan: ClusterPlan,
    transport: Transport,
    store: StateStore,
    reporter: Reporter,
    policy: PreflightPolicy,
    rotate: bool = False,
    head_ready: Callable[[], None] | None = None,
) -> BringUpOutcome:
    """Start Ray on every node, then run the fast checks unless ``policy`` skips them.

    ``rotate``: new credentials first (``credentials.rotate``; refused on a running cluster).
    ``head_ready``: called once the head has its files (``lifecycle.start``).

    Raises:
        PreflightFailedError: A check failed and ``policy`` enforces them (the cluster
            stays up; the error carries the outcome).
    """
    if policy is PreflightPolicy.SKIP:
        result = up(plan, transport, store, reporter, rotate=rotate, head_ready=head_ready)
        return BringUpOutcome(result, PreflightOutcome(policy))
    early: PreflightReport | None = None  # the checks run beside up's wait, if any
    assumed: frozenset[str] = frozenset()  # the nodes they took for up

    def checks_while_waiting(expected: frozenset[str]) -> None:
        # Every expected node's ray start has returned: its ports are open, so the
        # checks need not wait for Ray's word that it joined (one status poll or more).
        nonlocal early, assumed
        reporter.info("preflight checks (--no-preflight skips them)")
        assumed, early = expected, _checks(plan, transport, expected)

    result = up(
        plan,
        transport,
        store,
        reporter,
        rotate=rotate,
        alongside_wait=checks_while_waiting,
        head_ready=head_ready,
    )
    # up has just asked Ray which nodes are alive: the checks stand if it said what they
    # assumed (every node not failed), else they run again with Ray's answer.
    alive = frozenset(n.name for n in result.status.nodes if n.alive) if result.status else None
    expected = frozenset(o.name for o in result.nodes if o.action != "failed")
    report = early if alive == expected == assumed else None
    if report is None:
        report = _checks(plan, transport, expected, alive)
    outcome = BringUpOutcome(result, PreflightOutcome(policy, report))
    if outcome.preflight.failed and policy is PreflightPolicy.ENFORCE:
        raise PreflightFailedError(
            f"cluster {plan.inventory.name} is up, but preflight failed",
            outcome.preflight,
            outcome,
        )
    return outcome


def _checks(
    plan: ClusterPlan,
    transport: Transport,
    joined: frozenset[str],
    alive: frozenset[str] | None = None,
) -> PreflightReport:
    """The fast checks on the ``joined`` nodes (those ``up`` did not leave out)."""
    nodes = tuple(n for n in plan.nodes if n.name in joined)
    up_nodes = set(joined if alive is None else alive)
    return run_preflight(dataclasses.replace(plan, nodes=nodes), transport, alive=up_nodes)


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
