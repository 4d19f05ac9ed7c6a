"""The options of one rtk batch job: SLURM's (``#SBATCH``) and rtk's own inside the job.

Each value comes from the command line when given there, else from the inventory's
``slurm:`` section, else from a default derived from the inventory. Values that end
up in ``#SBATCH`` lines are checked against a safe character set (sbatch reads those
lines itself, unquoted, so a newline in a job name would start a shell command);
everything else reaches the script shell-quoted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolkit.errors import RtkError
from toolkit.inventory import Inventory
from toolkit.inventory.hostrange import compress_hosts

DEFAULT_JOB_OUTPUT = "rtk-%x-%j.out"
DEFAULT_OUTPUT_DIR = "rtk-runs"
DEFAULT_GRACE_S = 180
# Requeues a --requeue job may do when --max-restarts is not given.
DEFAULT_MAX_RESTARTS = 3
PREFLIGHT_MODES = ("enforce", "record", "skip")

TIME_PATTERN = re.compile(r"^([0-9]+-)?[0-9]+(:[0-9]{1,2}){0,2}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
_PARTITION = re.compile(r"^[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*$")
_OUTPUT_PATTERN = re.compile(r"^[A-Za-z0-9._%/+~@=,:-]+$")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_EXTRA_ARG = re.compile(r"^--([a-z][a-z0-9-]*)(=[A-Za-z0-9._%/+~@=,:*-]*)?$")
# Options rtk writes itself; an --sbatch-arg may not repeat them.
_MANAGED = {
    "job-name": "--job-name",
    "nodes": "--nodes",
    "ntasks-per-node": None,
    "gpus-per-node": "--gpus-per-node",
    "partition": "--partition",
    "account": "--account",
    "time": "--time",
    "output": "--job-output",
    "exclusive": "--exclusive",
    "signal": "--grace-s",
    "exclude": "--exclude",
    "requeue": "--requeue",
    "no-requeue": "--max-restarts 0",
}


class SbatchOptionError(RtkError):
    """An option of ``rtk sbatch`` (or the inventory's ``slurm:`` section) is invalid."""

    exit_code = 2


@dataclass(frozen=True)
class SbatchOptions:
    """Everything a rendered batch script depends on besides the inventory and command.

    Attributes:
        job_name: ``#SBATCH --job-name``.
        nodes: ``#SBATCH --nodes``; one Ray node per SLURM node.
        gpus_per_node: ``#SBATCH --gpus-per-node``, left out when 0.
        partition: ``#SBATCH --partition``, left out when None.
        account: ``#SBATCH --account``, left out when None.
        time: ``#SBATCH --time`` (minutes, HH:MM:SS, D-HH:MM:SS...), left out when None.
        job_output: ``#SBATCH --output``: the job's log, relative to the submit directory.
        exclusive: ``#SBATCH --exclusive``: no other job shares the nodes.
        exclude: ``#SBATCH --exclude``: nodes SLURM must not allocate (written as one
            compressed hostlist, ``node[3-5]``), left out when empty.
        grace_s: Seconds before the time limit at which SLURM sends SIGUSR1 to the
            batch shell (``--signal=B:USR1@grace_s``) and teardown begins.
        extra_args: Further ``#SBATCH`` options, each ``--name=value`` or ``--flag``.
        python: The Python that runs ``-m toolkit`` inside the job.
        output_dir: Where run directories go; relative means the submit directory.
        run_id: Run directory name; None: ``<job name>-<job id>`` at run time.
        preflight: enforce (a failed check ends the job), record, or skip.
        max_restarts: How many times the job may requeue itself at its time limit
            (``scontrol requeue``) to train on; 0: never (no ``#SBATCH --requeue``).
    """

    job_name: str
    nodes: int
    gpus_per_node: int
    python: str
    partition: str | None = None
    account: str | None = None
    time: str | None = None
    job_output: str = DEFAULT_JOB_OUTPUT
    exclusive: bool = False
    exclude: tuple[str, ...] = ()
    grace_s: int = DEFAULT_GRACE_S
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    output_dir: str = DEFAULT_OUTPUT_DIR
    run_id: str | None = None
    preflight: str = "enforce"
    max_restarts: int = 0

    @property
    def requeue(self) -> bool:
        """Whether the job requeues itself at its time limit until the run is done."""
        return self.max_restarts > 0

    @property
    def stop_wait_s(self) -> int:
        """How long teardown waits for the workload after SIGINT: half the grace period."""
        return max(5, self.grace_s // 2)

    def directives(self) -> list[str]:
        """The ``#SBATCH`` options, in the order the script lists them."""
        lines = [
            f"--job-name={self.job_name}",
            f"--nodes={self.nodes}",
            "--ntasks-per-node=1",
        ]
        if self.gpus_per_node > 0:
            lines.append(f"--gpus-per-node={self.gpus_per_node}")
        if self.partition:
            lines.append(f"--partition={self.partition}")
        if self.account:
            lines.append(f"--account={self.account}")
        if self.time:
            lines.append(f"--time={self.time}")
        lines.append(f"--output={self.job_output}")
        if self.exclusive:
            lines.append("--exclusive")
        if self.exclude:
            lines.append(f"--exclude={compress_hosts(self.exclude)}")
        lines.append(f"--signal=B:USR1@{self.grace_s}")
        if self.requeue:
            # Every allocation's log in one file: a requeued job truncates it otherwise.
            lines.extend(["--requeue", "--open-mode=append"])
        lines.extend(self.extra_args)
        return lines


def merge_options(inventory: Inventory, given: Mapping[str, Any]) -> SbatchOptions:
    """Merge the command line over the inventory's ``slurm:`` section over defaults.

    Args:
        inventory: The validated inventory (its ``slurm:`` section, nodes and head).
        given: Values from the command line, keyed by ``SbatchOptions`` field name;
            None (or a missing key) means not given.

    Raises:
        SbatchOptionError: Every invalid value, one per line, each with where it came
            from and what is allowed.
    """
    slurm = inventory.slurm
    problems: list[str] = []

    def pick(name: str, from_inventory: Any) -> tuple[Any, str]:
        value = given.get(name)
        if value is not None:
            return value, f"--{name.replace('_', '-')}"
        return from_inventory, f"{inventory.source}: slurm.{name}"

    job_name, where = pick("job_name", slurm.job_name)
    # An empty value given is checked (and refused), not taken as "use the default".
    job_name = f"rtk-{inventory.name}" if job_name is None else job_name
    _check(problems, _NAME, job_name, where, "letters, digits and . _ + - (at most 128)")

    nodes, where = pick("nodes", slurm.nodes)
    nodes = len(inventory.nodes) if nodes is None else nodes
    if nodes < 1:
        problems.append(f"{where}: got {nodes}; give 1 or more nodes")

    gpus, where = pick("gpus_per_node", slurm.gpus_per_node)
    if gpus is None:
        gpus = _uniform_gpus(inventory, problems)
    elif gpus < 0:
        problems.append(f"{where}: got {gpus}; give 0 or more GPUs per node")

    partition, where = pick("partition", slurm.partition)
    if partition is not None:
        _check(problems, _PARTITION, partition, where, "a name (or names, comma-separated)")
    account, where = pick("account", slurm.account)
    if account is not None:
        _check(problems, _NAME, account, where, "letters, digits and . _ + -")
    time, where = pick("time", slurm.time)
    if time is not None:
        _check(
            problems, TIME_PATTERN, time, where, "minutes, HH:MM:SS or D-HH:MM:SS, e.g. 04:00:00"
        )

    job_output = _given_or(given, "job_output", DEFAULT_JOB_OUTPUT)
    _check(problems, _OUTPUT_PATTERN, job_output, "--job-output", "a path without spaces or quotes")
    grace_s = given.get("grace_s")
    grace_s = DEFAULT_GRACE_S if grace_s is None else grace_s
    if not 10 <= grace_s <= 65535:
        problems.append(f"--grace-s: got {grace_s}; give 10 to 65535 seconds (teardown needs time)")
    exclude = tuple(given.get("exclude") or ())
    for host in exclude:
        _check(problems, _HOST, host, "--exclude", "a host name: letters, digits and . _ -")
    extra_args = tuple(given.get("extra_args") or ())
    problems.extend(_extra_arg_problems(extra_args))

    output_dir = _given_or(given, "output_dir", DEFAULT_OUTPUT_DIR)
    if not output_dir.strip():
        problems.append("--output-dir: got an empty path; give a directory (default: rtk-runs)")
    run_id = given.get("run_id")
    if run_id is not None:
        _check(problems, _RUN_ID, run_id, "--run-id", "letters, digits and . _ - (a directory)")
    preflight = given.get("preflight") or "enforce"
    if preflight not in PREFLIGHT_MODES:
        problems.append(f"--preflight: got {preflight!r}; give one of {', '.join(PREFLIGHT_MODES)}")
    max_restarts = given.get("max_restarts")
    if max_restarts is None:
        max_restarts = DEFAULT_MAX_RESTARTS if given.get("requeue") else 0
    elif max_restarts < 0:
        problems.append(
            f"--max-restarts: got {max_restarts}; give 0 (no requeue) or more "
            f"(--requeue alone: {DEFAULT_MAX_RESTARTS})"
        )
    python = _given_or(given, "python", inventory.head.python)
    if not python.strip():
        problems.append("--python: got an empty path; give the Python that has rtk installed")

    if problems:
        raise SbatchOptionError("\n".join(problems))
    return SbatchOptions(
        job_name=job_name,
        nodes=nodes,
        gpus_per_node=gpus or 0,
        python=python,
        partition=partition,
        account=account,
        time=time,
        job_output=job_output,
        exclusive=bool(given.get("exclusive")),
        exclude=exclude,
        grace_s=grace_s,
        extra_args=extra_args,
        output_dir=output_dir,
        run_id=run_id,
        preflight=preflight,
        max_restarts=max(0, max_restarts),
    )


def _given_or(given: Mapping[str, Any], name: str, default: str) -> str:
    """The value given on the command line (even an empty one), else ``default``."""
    value = given.get(name)
    return default if value is None else str(value)


def _check(
    problems: list[str], pattern: re.Pattern[str], value: str, where: str, want: str
) -> None:
    if not pattern.fullmatch(value):
        problems.append(f"{where}: got {value!r}; allowed: {want}")


def _uniform_gpus(inventory: Inventory, problems: list[str]) -> int:
    """The inventory nodes' GPU count when they all agree (SLURM asks for one per node)."""
    counts = {node.gpus for node in inventory.nodes}
    if len(counts) == 1:
        return counts.pop()
    listed = ", ".join(f"{n.name}: {n.gpus}" for n in inventory.nodes)
    problems.append(
        f"{inventory.source}: the nodes have different GPU counts ({listed}) and SLURM asks "
        "for one count per node; set slurm.gpus_per_node or pass --gpus-per-node"
    )
    return 0


def _extra_arg_problems(extra_args: Sequence[str]) -> list[str]:
    problems = []
    for arg in extra_args:
        match = _EXTRA_ARG.fullmatch(arg)
        if match is None:
            problems.append(
                f"--sbatch-arg {arg!r}: give one long option as --name=value or --flag, "
                "without spaces or quotes, e.g. --qos=high or --constraint=h100"
            )
            continue
        name = match.group(1)
        if name in _MANAGED:
            instead = _MANAGED[name]
            hint = f"use rtk's {instead} instead" if instead else "rtk always sets it"
            problems.append(f"--sbatch-arg {arg!r}: rtk writes --{name} itself; {hint}")
    return problems
