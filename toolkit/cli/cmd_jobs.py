"""``rtk launch``, ``rtk jobs``, ``rtk logs`` and ``rtk stop``: Ray jobs, thin over the Jobs API."""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

import click

from toolkit.cli.options.decorators import (
    choose_inventory,
    dry_run_option,
    inventory_and_command,
    inventory_options,
    local_option,
    print_json,
    slurm_option,
)
from toolkit.cli.output.jobs import (
    collection_lines,
    ended_lines,
    listing_footer,
    outcome_lines,
    render_jobs,
    stop_line,
)
from toolkit.errors import ClusterError, JobError
from toolkit.flows import CommandWorkload, Session
from toolkit.inventory import Inventory
from toolkit.jobs.client import (
    LIST_LIMIT,
    STOP_WAIT_S,
    follow_job,
    job_client,
    job_log,
    list_jobs,
    stop_job,
)
from toolkit.jobs.runtime_env import (
    RuntimeEnvError,
    merge_runtime_env,
    parse_env_pairs,
    parse_runtime_env_json,
)
from toolkit.lifecycle.ray_logs import (
    MAX_BYTES_PER_NODE,
    collect_ray_logs,
    default_destination,
    parse_duration_s,
)

LAUNCH_HELP = """Run any COMMAND on the cluster as a Ray job (its driver runs on the head).

\b
The working directory (--working-dir, default .) is shipped with the job, and the
command runs in the cluster's environment (NCCL/Gloo settings, Ray token). rtk
prints the job's log as it grows and exits with its outcome; Ctrl-C stops the job.
With --no-wait rtk prints the job's id and exits at once: rtk logs, rtk jobs and
rtk stop take it from there.

\b
The runtime environment reads as in ray job submit: --runtime-env-json's keys
(pip, py_modules, excludes, env_vars...) are added to rtk's (rtk's excludes
keep its state directory out of the package), --env KEY=VALUE wins over the
JSON's env_vars, --working-dir over its working_dir. What the
cluster needs stays rtk's, and asking to change it is an error: the token auth
(RAY_AUTH_MODE, RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH) and RTK_CLUSTER_DIR (how
rtk down finds the job's processes).

\b
Examples:
  rtk launch inv.yaml -- python my_train.py --lr 1e-4
  rtk launch inv.yaml --env WANDB_MODE=offline -- python -m openrlhf.cli.train_ppo_ray
  rtk launch inv.yaml --runtime-env-json '{"pip": ["emoji"]}' -- python -c 'import emoji'
  JOB=$(rtk launch inv.yaml --no-wait -- python sweep.py); rtk logs inv.yaml $JOB -f

\b
Exits 0 when the job SUCCEEDED (with --no-wait: when it was submitted), 1 when it
did not, 2 on a bad option, 130 on Ctrl-C (the job stopped).
"""

JOBS_HELP = """List the cluster's Ray jobs, newest first: id, status, start, end, entrypoint.

\b
Jobs submitted through Ray's Jobs API (rtk launch, rtk train, ray job submit);
the newest 20 unless --all, the entrypoint cut to the screen (--json: whole).
  rtk jobs inv.yaml
  rtk jobs inv.yaml --all --json | jq -r '.jobs[] | select(.status=="FAILED") | .job_id'
"""

LOGS_HELP = """Print a Ray job's log (JOB), or collect every node's logs for a bug report (--ray).

\b
JOB is the id rtk launch --no-wait printed, or one rtk jobs lists. -f follows the
log until the job ends and exits with its outcome (0 SUCCEEDED, 1 otherwise);
Ctrl-C stops following, not the job (rtk stop does that).
  rtk logs inv.yaml rtk-launch-mycluster-1718000000
  rtk logs inv.yaml rtk-launch-mycluster-1718000000 -f

\b
--ray brings every node's Ray logs (each session's logs folder under the
cluster's temp dir) and rtk's files on the node (its env file with secrets
masked, the samplers' traces) here: a folder per node, or one tarball with
--out FILE.tar.gz. fanout.parallel nodes at a time, at most --max-mib-per-node
each (newest files first; COLLECTION.txt in each node's folder lists what was
left out). The cluster's token is never collected, and masked wherever a log
shows it.
  rtk logs inv.yaml --ray                          ./rtk-logs-CLUSTER-TIME/NODE/...
  rtk logs inv.yaml --ray --out bug.tar.gz --since 2h

\b
Exits 0 when done, 1 for an unknown JOB (or a followed job that did not
succeed), 4 when a node's logs could not be collected (the others are).
"""

STOP_HELP = """Stop a Ray job (not the cluster: that is rtk down), and wait until it has ended.

\b
Ray sends the job's entrypoint SIGTERM, then SIGKILL if it lingers; rtk waits for
a final state, at most --timeout-s, and prints it.
  rtk stop inv.yaml rtk-launch-mycluster-1718000000

\b
Exits 0 when the job has ended (STOPPED, or it had ended before), 1 when it is
unknown or still running after --timeout-s.
"""


@click.command("launch", help=LAUNCH_HELP, context_settings={"ignore_unknown_options": True})
@click.argument("inventory", required=False, type=click.Path(dir_okay=False))
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--working-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Shipped with the job; the command runs inside it.  [default: .]",
)
@click.option(
    "--runtime-env-json",
    default=None,
    metavar="JSON",
    help="Ray runtime environment as a JSON object, merged with rtk's (see above).",
)
@click.option(
    "--env",
    "env_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a variable in the job's environment (repeatable); wins over the JSON's.",
)
@click.option(
    "--no-wait",
    is_flag=True,
    help="Submit, print the job's id on stdout, and exit: do not follow it.",
)
@click.option(
    "--submission-id",
    default=None,
    help="The job's id; taken already: an error (default: rtk-launch-CLUSTER-TIME, "
    "then -2, -3... when taken).",
)
@slurm_option
@local_option
@dry_run_option
def launch_cmd(
    inventory: str | None,
    command: tuple[str, ...],
    working_dir: str | None,
    runtime_env_json: str | None,
    env_pairs: tuple[str, ...],
    no_wait: bool,
    submission_id: str | None,
    slurm: bool,
    local: bool,
    dry_run: bool,
) -> None:
    """Run any entrypoint (help: LAUNCH_HELP)."""
    inv, command = inventory_and_command(inventory, command, local, slurm)
    try:
        user_env = parse_runtime_env_json(runtime_env_json)
        env_vars = parse_env_pairs(env_pairs)
    except RuntimeEnvError as e:
        raise click.UsageError(str(e)) from e
    workload = CommandWorkload(command, working_dir or ".")
    with Session(inv, log=click.echo) as session:
        request = session.job_request(workload)
        try:
            runtime_env = merge_runtime_env(request.runtime_env, user_env, env_vars, working_dir)
        except RuntimeEnvError as e:
            raise click.UsageError(str(e)) from e
        request = dataclasses.replace(
            request,
            runtime_env=runtime_env,
            submission_id=submission_id or request.submission_id,
        )
        if dry_run:
            click.echo(request.render(), nl=False)
            return
        if no_wait:
            job_id = session.submit_request(request, renumber=submission_id is None)
            click.echo(job_id)
            where = _inventory_words(inventory if not local else None, local, slurm)
            click.echo(
                f"rtk: job {job_id} submitted; follow it: rtk logs {where}{job_id} -f; "
                f"stop it: rtk stop {where}{job_id}",
                err=True,
            )
            return
        outcome = session.run_request(request, renumber=submission_id is None)
    for line in outcome_lines(outcome):
        click.echo(f"rtk: {line}", err=True)
    if not outcome.ok:
        sys.exit(1)


@click.command("jobs", help=JOBS_HELP)
@inventory_options
@click.option("--all", "show_all", is_flag=True, help="Every job, not only the newest 20.")
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as JSON, entrypoints whole.")
def jobs_cmd(
    inventory: str | None, local: bool, slurm: bool, show_all: bool, as_json: bool
) -> None:
    """List the cluster's jobs (help: JOBS_HELP)."""
    inv = choose_inventory(inventory, local, slurm)
    with Session(inv) as session:
        listing = list_jobs(
            job_client(session.plan, session.store), None if show_all else LIST_LIMIT
        )
    if as_json:
        print_json(
            {
                "cluster": inv.name,
                "total": listing.total,
                "jobs": [job.to_json() for job in listing.jobs],
            }
        )
        return
    if listing.jobs:
        for line in render_jobs(listing.jobs, shutil.get_terminal_size().columns):
            click.echo(line)
    again = f"rtk jobs {_inventory_words(inventory, local, slurm)}".rstrip()
    footer = listing_footer(listing, inv.name, again)
    if footer:
        click.echo(f"rtk: {footer}", err=True)


@click.command("logs", help=LOGS_HELP)
@click.argument("inventory", required=False, type=click.Path(dir_okay=False))
@click.argument("job", required=False)
@click.option("-f", "--follow", is_flag=True, help="Follow the log until the job ends.")
@click.option(
    "--ray",
    "ray_logs",
    is_flag=True,
    help="Collect every node's Ray logs and rtk's node files here, instead of a job's log.",
)
@click.option(
    "--out",
    type=click.Path(),
    default=None,
    help="With --ray: a new folder, or FILE.tar.gz.  [default: ./rtk-logs-CLUSTER-TIME]",
)
@click.option(
    "--since",
    default=None,
    metavar="DURATION",
    help="With --ray: only files modified in the last DURATION (90s, 30m, 2h, 1d).",
)
@click.option(
    "--max-mib-per-node",
    type=click.FloatRange(min=0.0, min_open=True),
    metavar="MIB",
    default=MAX_BYTES_PER_NODE / (1 << 20),
    show_default=True,
    help="With --ray: at most this many MiB of files from each node, the newest first.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="With --ray: print what each node gave as JSON."
)
@slurm_option
@local_option
def logs_cmd(
    inventory: str | None,
    job: str | None,
    follow: bool,
    ray_logs: bool,
    out: str | None,
    since: str | None,
    max_mib_per_node: float,
    as_json: bool,
    slurm: bool,
    local: bool,
) -> None:
    """A job's log, or every node's Ray logs (help: LOGS_HELP)."""
    inventory, job = _job_argument(inventory, job, local)
    words = _inventory_words(inventory, local, slurm)
    inv = choose_inventory(inventory, local, slurm)
    if ray_logs:
        if job is not None or follow:
            raise click.UsageError("--ray collects every node's logs: give no JOB and no -f")
        since_s = None
        if since is not None:
            try:
                since_s = parse_duration_s(since)
            except ValueError as e:
                raise click.BadParameter(str(e), param_hint="--since") from e
        _collect(inv, out, int(max_mib_per_node * (1 << 20)), since_s, as_json)
        return
    extra = [name for name, given in (("--out", out), ("--since", since)) if given is not None]
    if extra or as_json:
        raise click.UsageError(f"{', '.join(extra) or '--json'}: only with --ray")
    if job is None:
        raise click.UsageError(
            f"give a JOB (rtk jobs {words}lists them), or --ray for every node's Ray logs"
        )
    with Session(inv) as session:
        client = job_client(session.plan, session.store)
        try:
            if not follow:
                click.echo(job_log(client, job), nl=False)
                return
            try:
                info = follow_job(client, job, click.echo)
            except KeyboardInterrupt:
                click.echo(
                    f"rtk: stopped following; job {job} goes on (rtk stop {words}{job} ends it)",
                    err=True,
                )
                sys.exit(130)
        except JobError as e:
            raise JobError(f"{e}; rtk jobs {words}lists its jobs") from e
    for line in ended_lines(info, time.time()):
        click.echo(f"rtk: {line}", err=True)
    if info.status != "SUCCEEDED":
        sys.exit(1)


@click.command("stop", help=STOP_HELP)
@click.argument("inventory", required=False, type=click.Path(dir_okay=False))
@click.argument("job", required=False)
@click.option(
    "--timeout-s",
    type=click.FloatRange(min=0.0),
    metavar="SECONDS",
    default=STOP_WAIT_S,
    show_default=True,
    help="How long to wait for the job to end after asking it to stop.",
)
@slurm_option
@local_option
def stop_cmd(
    inventory: str | None, job: str | None, timeout_s: float, slurm: bool, local: bool
) -> None:
    """Stop a job (help: STOP_HELP)."""
    inventory, job = _job_argument(inventory, job, local)
    words = _inventory_words(inventory, local, slurm)
    inv = choose_inventory(inventory, local, slurm)
    if job is None:
        raise click.UsageError(f"give the JOB to stop (rtk jobs {words}lists them)")
    with Session(inv) as session:
        client = job_client(session.plan, session.store)
        try:
            stopped = stop_job(client, job, wait_s=timeout_s)
        except JobError as e:
            raise JobError(f"{e}; rtk jobs {words}lists its jobs") from e
    line = stop_line(stopped.info, stopped.was_running, timeout_s)
    if not stopped.info.ended:
        raise JobError(f"{line}; rtk jobs {words}shows it, rtk stop {words}{job} asks again")
    click.echo(f"{stopped.info.job_id} {stopped.info.status}")
    click.echo(f"rtk: {line}", err=True)


def _collect(
    inv: Inventory, out: str | None, max_bytes: int, since_s: float | None, as_json: bool
) -> None:
    """``rtk logs --ray``: collect, then one summary line, notes and failures by cause."""
    dest = Path(out) if out else default_destination(inv.name)
    with Session(inv) as session:
        plan = session.plan
        click.echo(
            f"rtk: collecting the logs of {len(plan.nodes)} node(s), "
            f"{plan.inventory.fanout.parallel} at a time",
            err=True,
        )
        collection = collect_ray_logs(plan, session.transport, dest, max_bytes, since_s)
    if as_json:
        print_json(collection.to_json())
    else:
        summary, notes = collection_lines(collection)
        click.echo(summary)
        for note in notes:
            click.echo(note, err=True)
    if collection.errors:
        raise ClusterError(
            f"the logs of {len(collection.errors)} node(s) could not be collected; "
            f"the others' are in {collection.out}"
        )


def _job_argument(
    inventory: str | None, job: str | None, local: bool
) -> tuple[str | None, str | None]:
    """INVENTORY and JOB as meant: with --local, or $RTK_INVENTORY, a lone word is the JOB."""
    if job is None and inventory is not None:
        from_env = bool(os.environ.get("RTK_INVENTORY")) and not os.path.isfile(inventory)
        if local or from_env:
            return None, inventory
    return inventory, job


def _inventory_words(inventory: str | None, local: bool, slurm: bool) -> str:
    """How the user named the cluster, for the commands rtk suggests (ends in a space)."""
    words = ["--local"] if local else []
    if slurm:
        words.append("--slurm")
    if inventory:
        words.append(shlex.quote(inventory))
    return "".join(f"{w} " for w in words)
