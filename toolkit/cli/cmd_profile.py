"""``rtk profile``: run a power-profiling sweep and print which setting wins."""

from __future__ import annotations

import sys

import click

from toolkit.cli.options.decorators import dry_run_option, verbose_option
from toolkit.cli.output.progress import progress_reporter
from toolkit.flows import Session
from toolkit.flows.sweep import run_sweep
from toolkit.flows.sweep_plan import plan_sweep
from toolkit.inventory import load_inventory
from toolkit.profile.experiment import load_experiment
from toolkit.profile.files import write_results
from toolkit.profile.results import aggregate, load_runs
from toolkit.profile.table import format_table

PROFILE_HELP = """Run every configuration of EXPERIMENT (a YAML file) and compare energy and speed.

\b
The file names the cluster (an inventory), the workload (rtk train options, any
command, or vllm), the axes to sweep and the repeats:

\b
  name: tiny-sweep
  inventory: inventory.yaml
  workload:
    train: {model_size: tiny, max_steps: 30, barrier_every: 5}
  axes:
    batch_size: [4, 8]
    nodes: [1, 2]              # the inventory's first N nodes
    # power_limit_w: [250, 300, 350]   GPU power limit (root), restored after
    # gpu_clocks_mhz: [[1400, 1400]]   locked SM clocks (root), reset after
  repeats: 2
  baseline_s: 10               # idle power before each run
  cooldown_max_s: 60           # after it, until power and temperature settle

\b
Each run gets its own run directory (telemetry, report) under the sweep directory
(output_dir:, default profile-runs/<name> beside the file). Running it again skips
the runs that succeeded: an interrupted sweep resumes where it stopped. A failed
run is recorded as failed and the sweep goes on. At the end: a table per
configuration (mean ± spread over repeats), results.csv, runs.csv, results.json,
and plots (energy per token against the power limit; the Pareto front of tokens/s
against J/token, or of time against energy when not every configuration counts tokens).

\b
Examples:
  rtk profile sweep.yaml
  rtk profile sweep.yaml --max-runs 4      run at most 4 unfinished runs, then stop
  rtk profile sweep.yaml --dry-run         the runs still to do, and their jobs
  rtk profile sweep.yaml --results         only rebuild the table, CSV and plots
  rtk profile sweep.yaml --restore         put back GPU settings after a crash
"""


@click.command("profile", help=PROFILE_HELP)
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--max-runs", type=click.IntRange(min=1), help="Stop after this many runs.")
@click.option("--keep-cluster", is_flag=True, help="Leave the cluster up at the end.")
@click.option("--results", "results_only", is_flag=True, help="Only (re)build the results.")
@click.option("--restore", is_flag=True, help="Only restore GPU power limits and clocks.")
@dry_run_option
@verbose_option
def profile_cmd(
    experiment: str,
    max_runs: int | None,
    keep_cluster: bool,
    results_only: bool,
    restore: bool,
    dry_run: bool,
    verbose: bool,
) -> None:
    """Run a sweep (help: PROFILE_HELP)."""
    exp = load_experiment(experiment)
    if restore:
        from toolkit.gpu.limits_over_ssh import restore_all

        with Session(load_inventory(exp.inventory_path)) as session:
            if dry_run:
                nodes = [n.name for n in session.plan.nodes]
                click.echo(f"rtk profile: would restore GPU settings on {', '.join(nodes)}")
                return
            done = restore_all(session.plan, session.transport)
        click.echo(f"rtk profile: GPU settings restored on {len(done)} node(s)")
        return
    if dry_run:
        click.echo(plan_sweep(exp, max_runs, keep_cluster).render(), nl=False)
        return
    failed = 0
    if not results_only:
        # Plain lines, not a live block: the runs' logs are printed between bring-ups.
        # Each bring-up may use fewer nodes than the inventory has: its size is an upper
        # bound, enough to choose between per-node lines and counts.
        total = len(load_inventory(exp.inventory_path).nodes)
        with progress_reporter(verbose, total, live=False) as reporter:
            plan = plan_sweep(exp, max_runs, keep_cluster)
            outcome = run_sweep(exp, plan, reporter, click.echo)
        failed = len(outcome.failed)
        click.echo(
            f"rtk profile: {len(outcome.ran)} run(s) this time ({failed} failed), "
            f"{len(outcome.skipped)} finished earlier and skipped"
        )
    runs = load_runs(exp.sweep_dir)
    rows = aggregate(runs)
    files = write_results(exp.sweep_dir, runs, rows)
    click.echo(format_table(rows))
    for note in files.notes:
        click.echo(f"note: {note}")
    click.echo(f"results: {files.results_csv}")
    for plot in files.plots.values():
        click.echo(f"plot: {plot}")
    if failed:
        sys.exit(1)
