"""``rtk sbatch render`` and ``rtk sbatch submit``: the rtk flow as one SLURM batch job."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from toolkit.cli.options.decorators import exclude_options
from toolkit.cluster.containers.slurm_step import batch_script_note
from toolkit.cluster.exclude import asked_exclusions
from toolkit.inventory import load_inventory
from toolkit.rundir import RunDir
from toolkit.slurm.batch_options import DEFAULT_MAX_RESTARTS, PREFLIGHT_MODES, merge_options
from toolkit.slurm.requeue import ENDED_BY, Allocation, end_allocation
from toolkit.slurm.sbatch_script import TEMPLATES, render_script, torchrun_words
from toolkit.slurm.submit import exit_status, expand_output_pattern, follow, submit

F = TypeVar("F", bound=Callable[..., Any])

SBATCH_HELP = """The rtk flow inside SLURM: one batch job brings Ray up, checks, runs, tears down.

\b
The job runs `python -m toolkit ... --slurm` with the head node's Python: Ray on
every node of the allocation (srun, not SSH; ports from the job id), preflight,
then the work, and on every way out (end, failure, scancel, time limit) Ray
stopped on every node and the report written. The inventory's text is embedded
in the script; its slurm: section gives the defaults of the #SBATCH options.
"""

RENDER_HELP = """Print the batch script for INVENTORY (or write it with --output).

\b
--template cluster (the default): Ray, preflight, then COMMAND (the words after
--) as a Ray job under `rtk telemetry record`; without a COMMAND the cluster is
held until the time limit or scancel. --template train: Ray, preflight, then
`rtk train` with telemetry and its report; the words after -- are rtk train's
options (see rtk train --help).

\b
Options come from the command line, else the inventory's slurm: section, else:
--nodes the inventory's node count, --gpus-per-node its nodes' GPU count,
--job-name rtk-<cluster>. Relative --output-dir and --job-output paths are
relative to the directory you submit from.

\b
Examples:
  rtk sbatch render inv.yaml --nodes 4 --time 01:00:00 > ray.sbatch
  rtk sbatch render inv.yaml -- python my_ray_program.py --epochs 1
  rtk sbatch render inv.yaml --template train --partition gpu --account ml \\
      -- --model-size 350M --strategy fsdp2 --barrier-every 10
  rtk sbatch render inv.yaml --sbatch-arg=--qos=high --sbatch-arg=--constraint=h100
  rtk sbatch render inv.yaml --exclude-file preflight.json    not the nodes it names
"""

REQUEUE_HELP = """
\b
REQUEUE (--template train --requeue): a run longer than one allocation.
SIGUSR1 comes --grace-s before the time limit; rtk train is stopped with
SIGINT, every rank finishes its step and saves a checkpoint there, Ray is
torn down and the report written, and then, if the run is short of its
--max-steps, the job requeues itself (scontrol requeue: the same job id, run
directory and log, SLURM_RESTART_COUNT counting the restarts). SLURM starts it
again after its requeue delay (slurm.conf AuthInfo cred_expire, 120 s by
default); rtk train resumes from the checkpoint, metrics.jsonl keeps every step
once, and the report covers every allocation. RUN_DIR/allocations.jsonl records
each allocation and why it did or did not requeue. Not requeued: a run that is
done, failed, or was stopped with scancel (SIGTERM) or SIGINT.
"""

SUBMIT_HELP = (
    """Render the batch script for INVENTORY and submit it with sbatch; print the job id.

\b
Takes the same options as `rtk sbatch render`. With --wait, rtk then follows
the job's output file as it grows until the job ends, and exits with its
outcome: 0 when COMPLETED, else the job's exit code (or 1). Ctrl-C stops
following, not the job (scancel JOBID does that). A requeued job is followed
through every allocation.

\b
Examples:
  rtk sbatch submit inv.yaml --nodes 2 --time 30 -- python my_ray_program.py
  rtk sbatch submit inv.yaml --template train --wait -- --max-steps 200 --barrier-every 10
  JOB=$(rtk sbatch submit inv.yaml --time 08:00:00)    hold a cluster for 8 hours
  rtk sbatch submit inv.yaml --template train --time 04:00:00 --requeue \\
      -- --model-size 350M --max-steps 50000 --save-steps 1000
"""
    + REQUEUE_HELP
)

REQUEUE_CMD_HELP = """Run by a --requeue job's teardown: requeue the job if its run needs more time.

\b
Reads RUN_DIR (metrics.jsonl, train_config.json, allocations.jsonl) and requeues
job --job-id (scontrol requeue) when the allocation ended at its time limit
(--ended-by USR1), the run is short of its max_steps, this allocation trained at
least one step, and fewer than --max-restarts restarts were used. Either way it
appends this allocation to RUN_DIR/allocations.jsonl and prints why.
"""

# rtk train options the template sets itself.
_TRAIN_OWN = {
    "--local": "the job's inventory is always used",
    "--slurm": "the script passes it",
    "--output-dir": "give rtk sbatch --output-dir instead",
    "--run-id": "give rtk sbatch --run-id instead",
    "--preflight": "give rtk sbatch --preflight enforce|record|skip instead",
    "--no-preflight": "give rtk sbatch --preflight skip instead",
    "--help": "see rtk train --help",
    "-h": "see rtk train --help",
}


def job_options(func: F) -> F:
    """The options render and submit share: template, #SBATCH values, run directory."""
    options = [
        click.argument("inventory", type=click.Path(exists=True, dir_okay=False)),
        click.argument("command", nargs=-1, type=click.UNPROCESSED),
        click.option(
            "--template",
            type=click.Choice(list(TEMPLATES)),
            default="cluster",
            show_default=True,
            help="cluster: Ray (+ COMMAND under telemetry); train: rtk train's power run; "
            "torchrun: rtk torchrun (the words after --: its options, --, the script).",
        ),
        click.option("--nodes", type=int, help="Nodes to allocate, one Ray node each."),
        click.option("--gpus-per-node", type=int, help="GPUs per node; 0 leaves them out."),
        click.option("--partition", help="Partition (sbatch --partition)."),
        click.option("--account", help="Account to charge (sbatch --account)."),
        click.option("--time", help="Time limit: minutes, HH:MM:SS or D-HH:MM:SS."),
        click.option("--job-name", help="Job name (default: rtk-<cluster>)."),
        click.option(
            "--job-output",
            help="The job's log file, sbatch --output pattern (default: rtk-%x-%j.out).",
        ),
        click.option(
            "--exclusive", is_flag=True, help="No other job on the nodes (sbatch --exclusive)."
        ),
        click.option(
            "--grace-s",
            type=int,
            help="Teardown starts this many seconds before the time limit (default: 180).",
        ),
        click.option(
            "--sbatch-arg",
            "extra_args",
            multiple=True,
            help="Another #SBATCH option as --name=value (repeatable), e.g. --qos=high.",
        ),
        click.option(
            "--output-dir",
            help="Where run directories go, on the nodes (default: rtk-runs in the submit dir).",
        ),
        click.option("--run-id", help="Run directory name (default: <job name>-<job id>)."),
        click.option(
            "--preflight",
            type=click.Choice(PREFLIGHT_MODES),
            help="enforce: a failed check ends the job (default); record: keep preflight.json "
            "and go on; skip: run no check.",
        ),
        click.option("--python", help="Python with rtk inside the job (default: the head's)."),
        click.option(
            "--requeue",
            is_flag=True,
            help="--template train: at the time limit the run checkpoints and the job "
            f"requeues itself until max_steps (at most --max-restarts times, default "
            f"{DEFAULT_MAX_RESTARTS}); see REQUEUE below.",
        ),
        click.option(
            "--max-restarts",
            type=int,
            help="Requeues the job may do (implies --requeue when more than 0); 0: none.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    # Nodes SLURM must not allocate: #SBATCH --exclude=<hostlist>.
    return exclude_options(func)


@click.group("sbatch", help=SBATCH_HELP)
def sbatch_group() -> None:
    """The SLURM batch commands (help: SBATCH_HELP)."""


@sbatch_group.command("render", help=RENDER_HELP)
@job_options
@click.option(
    "-o",
    "--output",
    "output_file",
    type=click.Path(dir_okay=False, writable=True),
    help="Write the script to this file instead of printing it.",
)
def render_cmd(
    output_file: str | None,
    inventory: str,
    template: str,
    command: tuple[str, ...],
    exclude: tuple[str, ...],
    exclude_file: tuple[str, ...],
    **given: Any,
) -> None:
    """Print the batch script (help: RENDER_HELP)."""
    script = _script_and_names(inventory, template, command, exclude, exclude_file, given)[0]
    if output_file:
        Path(output_file).write_text(script, encoding="utf-8")
        click.echo(f"rtk: wrote {output_file}; submit it with sbatch {output_file}", err=True)
    else:
        click.echo(script, nl=False)


@sbatch_group.command("submit", help=SUBMIT_HELP)
@job_options
@click.option("--wait", is_flag=True, help="Follow the job's output; exit with its outcome.")
@click.option(
    "--poll-s", type=float, default=2.0, show_default=True, help="With --wait: poll interval."
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the script and the sbatch command that would submit it; submit nothing.",
)
def submit_cmd(
    wait: bool,
    poll_s: float,
    dry_run: bool,
    inventory: str,
    template: str,
    command: tuple[str, ...],
    exclude: tuple[str, ...],
    exclude_file: tuple[str, ...],
    **given: Any,
) -> None:
    """Render and submit the batch script (help: SUBMIT_HELP)."""
    script, job_name, job_output = _script_and_names(
        inventory, template, command, exclude, exclude_file, given
    )
    if dry_run:
        click.echo(script, nl=False)
        click.echo(
            f"rtk: dry run: would submit this with `sbatch --parsable` (script on stdin) "
            f"from {os.getcwd()}; the job's log: {job_output}",
            err=True,
        )
        return
    job_id = submit(script, dict(os.environ))
    click.echo(job_id)
    log_path = expand_output_pattern(job_output, job_id, job_name)
    click.echo(f"rtk: submitted job {job_id}; its log: {log_path}", err=True)
    if not wait:
        return
    try:
        state = follow(job_id, log_path, lambda text: click.echo(text, nl=False), poll_s)
    except KeyboardInterrupt:
        click.echo(
            f"\nrtk: stopped following; job {job_id} goes on (scancel {job_id} stops it)",
            err=True,
        )
        sys.exit(130)
    click.echo(f"rtk: job {job_id} {state.describe()}", err=True)
    sys.exit(exit_status(state))


@sbatch_group.command("requeue", help=REQUEUE_CMD_HELP)
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--job-id", required=True, help="The job to requeue ($SLURM_JOB_ID).")
@click.option(
    "--restart-count",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Restarts so far ($SLURM_RESTART_COUNT).",
)
@click.option(
    "--max-restarts",
    type=click.IntRange(min=0),
    required=True,
    help="Restarts allowed in all.",
)
@click.option(
    "--ended-by",
    type=click.Choice(ENDED_BY),
    required=True,
    help="What ended the allocation: USR1 (time limit), TERM, INT, or end (by itself).",
)
@click.option("--started-s", type=float, help="When the allocation's script started (epoch s).")
@click.option("--nodes", default="?", help="The allocation's nodes ($SLURM_JOB_NODELIST).")
def requeue_cmd(
    run_dir: str,
    job_id: str,
    restart_count: int,
    max_restarts: int,
    ended_by: str,
    started_s: float | None,
    nodes: str,
) -> None:
    """Requeue the job if its run needs more time (help: REQUEUE_CMD_HELP)."""
    allocation = Allocation(job_id, restart_count, nodes, started_s, ended_by)
    record = end_allocation(RunDir(run_dir), allocation, max_restarts)
    click.echo(f"rtk: job {job_id}: {record.reason}")


def _script_and_names(
    inventory_path: str,
    template: str,
    command: tuple[str, ...],
    exclude: tuple[str, ...],
    exclude_file: tuple[str, ...],
    given: Mapping[str, object],
) -> tuple[str, str, str]:
    """The script, the job name and the job's output pattern.

    ``given``: the #SBATCH and run directory options, as ``merge_options`` takes them.
    """
    asked = asked_exclusions(exclude, exclude_file)
    inventory = load_inventory(inventory_path)
    options = merge_options(inventory, {**given, "exclude": tuple(e.node for e in asked)})
    if template == "train":
        _check_train_options(command)
    if template == "torchrun":
        command = tuple(torchrun_words(command))
        _check_torchrun_words(command)
    text = Path(inventory_path).read_text(encoding="utf-8")
    note = batch_script_note(inventory)
    script = render_script(template, text, inventory_path, options, command, note)
    return script, options.job_name, options.job_output


def _rtk_command(name: str) -> click.Command:
    """Rtk's ``name`` command, as the top-level group loads it for ``rtk name``.

    Through the group, not an import: no command module imports another.
    """
    root = click.get_current_context().find_root()
    group = root.command
    command = group.get_command(root, name) if isinstance(group, click.Group) else None
    if command is None:
        raise click.UsageError(f"rtk sbatch runs outside rtk's command line: no {name!r}")
    return command


def _check_torchrun_words(args: tuple[str, ...]) -> None:
    """Parse the words as rtk torchrun would, so a typo fails now, not in the queue."""
    torchrun_cmd = _rtk_command("torchrun")
    if "--" not in args:
        raise click.UsageError(
            "--template torchrun: give the script after rtk torchrun's options and --, "
            "e.g. -- --auto-steps -- train.py --epochs 1"
        )
    try:
        torchrun_cmd.make_context("rtk torchrun", ["inv.yaml", *args], resilient_parsing=False)
    except click.UsageError as e:
        raise click.UsageError(f"the words after -- (rtk torchrun's): {e.format_message()}") from e


def _check_train_options(args: tuple[str, ...]) -> None:
    """Parse the words after -- as rtk train would, so a typo fails now, not in the queue."""
    train_cmd = _rtk_command("train")
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in _TRAIN_OWN:
            raise click.UsageError(f"rtk train option {name} after --: {_TRAIN_OWN[name]}")
    try:
        train_cmd.make_context("rtk train", ["inventory.yaml", *args])
    except click.ClickException as e:
        raise click.UsageError(
            f"rtk train options after -- ({' '.join(args)}): {e.format_message()}"
        ) from e
