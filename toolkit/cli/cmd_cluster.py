"""``rtk up``, ``rtk status``, ``rtk down``."""

from __future__ import annotations

import sys

import click

from toolkit.cli.options.decorators import (
    choose_inventory,
    exclude_options,
    inventory_options,
    print_json,
    verbose_option,
)
from toolkit.cli.output.progress import SMALL_CLUSTER, progress_reporter
from toolkit.cluster.exclude import asked_exclusions
from toolkit.cluster.node_groups import group_nodes, render_failure_groups
from toolkit.cluster.plan import ClusterPlan
from toolkit.cluster.ray_status import ClusterStatus
from toolkit.errors import ClusterError, PreflightError
from toolkit.flows import BringUpOutcome, PreflightFailedError, PreflightPolicy, Session
from toolkit.inventory import Inventory
from toolkit.inventory.hostrange import fit_hostlist

DRY_RUN_HELP = (
    "Print the plan (commands, files, environment, ports) and touch nothing: one block "
    "per command shape, headed by its nodes as a host list."
)
FULL_HELP = "With --dry-run: print every node's commands, not one block per command shape."
JSON_HELP = "Print the result as JSON on stdout (progress stays on stderr)."
TIMINGS_HELP = (
    "Print where the seconds went: probe + files, head start, worker starts, wait loop "
    '(--json always has them, under "timings").'
)

ROTATE_HELP = (
    "Make a new token, CA and node certificates before starting (refused while the "
    "cluster runs: rtk down first)."
)


UP_HELP = """Start Ray on every node of INVENTORY and wait until the nodes are alive.

\b
The head starts first, then the workers in parallel. Every Ray port is pinned
from the inventory, token authentication is on (the token travels as a 0600
file, never on a command line), and each node's environment (socket interface,
NCCL/Gloo settings) is written to a 0600 env file that ray start reads.
With ray.tls: true in the inventory, Ray's gRPC runs in TLS: rtk keeps a CA for
the cluster here and sends each node its certificate and key (0600).
Running it again starts nothing new on nodes where the cluster already runs.

\b
Then the fast preflight checks run (host, software, clocks, GPUs, Ray ports
between every pair: rtk preflight without --bandwidth, about 2 s). A failed
check makes rtk up exit 1 with the cluster left up, so you can look and fix;
--no-preflight skips them.

\b
--exclude NODE (names or ranges like node[3-5], repeatable) and --exclude-file
PATH (the JSON of rtk preflight --json, whose "exclude" list is used, or text:
one node or range per line, # comments) bring up the other nodes, when they
still number min_nodes; never the head. The commands after (status, preflight,
train) leave them out too, until the next rtk up; rtk down stops every node.

\b
Examples:
  rtk up --local                 this machine as a one-node cluster
  rtk up inv.yaml --dry-run      show the plan, one block per command shape
  rtk up inv.yaml --dry-run --full   every node's commands
  rtk up inv.yaml --json         machine-readable result
  rtk preflight inv.yaml --json > pf.json; rtk up inv.yaml --exclude-file pf.json
"""


@click.command("up", help=UP_HELP)
@inventory_options
@click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)
@click.option("--full", is_flag=True, help=FULL_HELP)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.option("--no-preflight", is_flag=True, help="Skip the fast preflight checks after.")
@click.option("--timings", is_flag=True, help=TIMINGS_HELP)
@click.option("--rotate-credentials", is_flag=True, help=ROTATE_HELP)
@exclude_options
@verbose_option
def up_cmd(
    inventory: str | None,
    local: bool,
    slurm: bool,
    dry_run: bool,
    full: bool,
    as_json: bool,
    no_preflight: bool,
    timings: bool,
    rotate_credentials: bool,
    exclude: tuple[str, ...],
    exclude_file: tuple[str, ...],
    verbose: bool,
) -> None:
    """Bring the cluster up (help: UP_HELP)."""
    check_full(full, dry_run)
    inv = choose_inventory(inventory, local, slurm)
    policy = PreflightPolicy.SKIP if no_preflight else PreflightPolicy.ENFORCE
    excluded = asked_exclusions(exclude, exclude_file)
    reporter = progress_reporter(verbose)
    with reporter, Session(inv, reporter, excluded=excluded) as session:
        reporter.expect(len(session.plan.nodes))
        if dry_run:
            # --json keeps every node: there is no summary to parse.
            click.echo(session.up_plan(full=full or as_json), nl=False)
            return
        failed: PreflightFailedError | None = None
        try:
            brought = session.bring_up(policy, rotate=rotate_credentials)
        except PreflightFailedError as e:
            failed = e
            assert e.bring_up is not None
            brought = e.bring_up
    render_up_result(inv, session.plan, brought, as_json, verbose)
    if timings and brought.up.timings is not None:
        # With --json they are in the JSON already ("timings"); the table goes to stderr.
        click.echo(brought.up.timings.render(), nl=False, err=as_json)
    if failed is not None:
        raise PreflightError(
            f"cluster {inv.name} is up, but preflight failed (the FAIL lines above); "
            "fix it and run rtk preflight, or rtk down"
        ) from failed


def check_full(full: bool, dry_run: bool) -> None:
    """``--full`` says how much of the plan ``--dry-run`` prints; alone it means nothing."""
    if full and not dry_run:
        raise click.UsageError("--full goes with --dry-run (it prints every node's plan)")


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


@click.command("status")
@inventory_options
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def status_cmd(inventory: str | None, local: bool, slurm: bool, as_json: bool) -> None:
    """Show which nodes of INVENTORY are alive in Ray, with their resources.

    Exits 0 when every node is alive with the GPUs it should have, 1 otherwise.
    """
    inv = choose_inventory(inventory, local, slurm)
    with Session(inv) as session:
        status = session.status()
    if as_json:
        print_json(status.to_json())
    else:
        click.echo(render_status(status))
    if len(status.ready) < len(status.nodes):
        sys.exit(1)


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


@click.command("down")
@inventory_options
@click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)
@click.option("--full", is_flag=True, help=FULL_HELP)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@verbose_option
def down_cmd(
    inventory: str | None,
    local: bool,
    slurm: bool,
    dry_run: bool,
    full: bool,
    as_json: bool,
    verbose: bool,
) -> None:
    """Stop the Ray that rtk started on every node of INVENTORY, and remove its files.

    Only processes started from this cluster's env file are stopped; another Ray on
    the same machine keeps running (plain `ray stop` would kill it). Works also when
    the head is already gone.
    """
    check_full(full, dry_run)
    inv = choose_inventory(inventory, local, slurm)
    # Every node is stopped, the excluded ones too: no need to know which they were.
    reporter = progress_reporter(verbose)
    with reporter, Session(inv, reporter, excluded=()) as session:
        reporter.expect(len(session.plan.nodes))
        if dry_run:
            click.echo(session.down_plan(full=full or as_json), nl=False)
            return
        result = session.tear_down()
        # A node whose stop raised (unreachable) sent no phase: count it as failed here.
        for name, why in result.failed.items():
            reporter.phase(name, "failed", why)
    if as_json:
        print_json(result.to_json())
    else:
        count = sum(a.stopped for a in result.stopped.values())
        click.echo(
            f"cluster {inv.name}: stopped {count} process(es) on {len(result.stopped)} node(s)"
        )
    if result.failed:
        if verbose or len(result.stopped) + len(result.failed) <= SMALL_CLUSTER:
            why = "; ".join(f"{name}: {why}" for name, why in result.failed.items())
        else:
            why = f"{len(result.failed)} node(s) {fit_hostlist(list(result.failed))} (causes above)"
        raise ClusterError(f"could not stop: {why}")
