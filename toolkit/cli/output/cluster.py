"""What ``rtk up`` and ``rtk status`` print about a cluster.

``rtk demo`` and ``rtk train --up`` print the same.
"""

from __future__ import annotations

import click

from toolkit.cli.options.decorators import print_json
from toolkit.cli.output.progress import SMALL_CLUSTER
from toolkit.cluster.node_groups import group_nodes, render_failure_groups
from toolkit.cluster.plan import ClusterPlan
from toolkit.cluster.ray_status import ClusterStatus
from toolkit.flows import BringUpOutcome
from toolkit.inventory import Inventory
from toolkit.inventory.hostrange import fit_hostlist


def render_up_result(
    inv: Inventory,
    plan: ClusterPlan,
    brought: BringUpOutcome,
    as_json: bool,
    verbose: bool = False,
) -> None:
    """Print what ``rtk up`` did: nodes left out, the cluster's state, failed checks.

    On a small cluster or with ``verbose``, a line per node excluded or left out; on a
    larger one, exclusions grouped by reason and the nodes left out as one hostlist
    (the progress display has just listed their failures grouped by cause).
    """
    result = brought.up
    checked = brought.preflight.report
    per_node = verbose or len(plan.nodes) <= SMALL_CLUSTER
    if per_node:
        for exclusion in plan.excluded:
            click.echo(f"rtk: excluded: {exclusion.describe()}", err=True)
    else:
        groups = group_nodes((e.node, "; ".join(e.reasons)) for e in plan.excluded)
        for line in render_failure_groups(groups, "rtk: excluded"):
            click.echo(line, err=True)
    allowed = f"min_nodes {inv.min_nodes} allows it"
    if per_node:
        for outcome in brought.left_out:
            click.echo(f"rtk: {outcome.name} left out ({allowed}): {outcome.error}", err=True)
    elif brought.left_out:
        names = [o.name for o in brought.left_out]
        click.echo(
            f"rtk: {len(names)} node(s) left out ({allowed}): {fit_hostlist(names)} "
            "(causes above; --verbose or --json for each)",
            err=True,
        )
    if as_json:
        print_json(
            {
                **result.to_json(),
                "excluded": [e.to_json() for e in plan.excluded],
                "preflight": checked.to_json() if checked else None,
            }
        )
    else:
        status = result.status
        ready = len(status.ready) if status else 0
        if verbose or len(plan.nodes) <= SMALL_CLUSTER:
            fresh = ", ".join(result.started)
        else:
            fresh = f"{len(result.started)} node(s) {fit_hostlist(result.started, 80)}"
        fresh = fresh or "none (already running)"
        click.echo(
            f"cluster {inv.name} is up: {ready}/{len(plan.nodes)} node(s) alive after "
            f"{result.duration_s:.1f} s; started: {fresh}"
        )
        click.echo(f"dashboard {plan.dashboard_url}")
    if checked is not None:
        click.echo(checked.render(only_problems=True), nl=False, err=as_json)


def render_status(status: ClusterStatus) -> str:
    """Status as a small table."""
    lines = [
        f"cluster {status.cluster}: {len(status.ready)}/{len(status.nodes)} node(s) ready"
        + (f", Ray {status.ray_version}" if status.ray_version else "")
    ]
    if status.error:
        lines.append(f"  {status.error}")
    lines.append(
        f"  {'node':<16} {'role':<7} {'state':<8} {'ip':<16} {'CPU':>5} {'GPU':>5} {'memory':>9}"
    )
    for n in status.nodes:
        state = "ready" if n.ready else ("alive" if n.alive else "missing")
        memory = f"{n.resources.get('memory', 0) / 2**30:.1f} GiB" if n.alive else "-"
        lines.append(
            f"  {n.name:<16} {n.role:<7} {state:<8} {n.node_ip or '-':<16} "
            f"{n.resources.get('CPU', 0):>5g} {n.resources.get('GPU', 0):>5g} {memory:>9}"
            + (f"  {n.problem}" if n.problem else "")
        )
    lines += [f"  {e.node:<16} excluded by rtk up: {'; '.join(e.reasons)}" for e in status.excluded]
    lines.append(f"  dashboard {status.dashboard_url}")
    return "\n".join(lines)
