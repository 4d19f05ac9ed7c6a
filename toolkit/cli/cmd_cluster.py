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
from toolkit.cli.output.cluster import render_status, render_up_result
from toolkit.cli.output.progress import SMALL_CLUSTER, progress_reporter
from toolkit.cluster.exclude import asked_exclusions
from toolkit.errors import ClusterError, PreflightError
from toolkit.flows import PreflightFailedError, PreflightPolicy, Session
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
            plan = session.up_plan(full or as_json, policy, rotate_credentials)
            click.echo(plan, nl=False)
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
