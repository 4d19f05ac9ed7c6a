"""Pieces the CLI commands share: choosing the inventory, progress, JSON output."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO, TypeVar

import click

from toolkit.cluster.progress_reporter import Phase
from toolkit.inventory import Inventory, default_inventory, load_inventory
from toolkit.telemetry.options import TelemetryOptions, sensors_problem
from toolkit.telemetry.sensors.base import DEFAULT_ENERGY_RATE_HZ

F = TypeVar("F", bound=Callable[..., Any])


SLURM_HELP = (
    "Inside a SLURM job: the allocation's nodes over srun, ports and temp dir per job "
    "(the inventory gives the settings)."
)


def slurm_option(func: F) -> F:
    """Add ``--slurm`` (the inventory becomes the allocation's cluster)."""
    return click.option("--slurm", is_flag=True, help=SLURM_HELP)(func)


def inventory_options(func: F) -> F:
    """Add ``[INVENTORY]``, ``--local`` and ``--slurm`` to a command."""
    func = slurm_option(func)
    func = local_option(func)
    return click.argument("inventory", required=False, type=click.Path(dir_okay=False))(func)


def exclude_options(func: F) -> F:
    """Add ``--exclude NODE`` and ``--exclude-file PATH`` (both repeatable)."""
    func = click.option(
        "--exclude-file",
        multiple=True,
        type=click.Path(exists=True, dir_okay=False),
        help="Leave out the nodes in this file: rtk preflight --json's output (its "
        '"exclude" list) or text, one node or range per line, # comments.',
    )(func)
    return click.option(
        "--exclude",
        multiple=True,
        metavar="NODE",
        help="Leave out this node, or a range like node[3-5] (repeatable).",
    )(func)


DRY_RUN_HELP = "Print what would run (commands, job, environment) and touch nothing."


def dry_run_option(func: F) -> F:
    """Add ``--dry-run`` (print the plan, touch nothing)."""
    return click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)(func)


def local_option(func: F) -> F:
    """Add ``--local`` (the embedded one-node inventory) to a command with an INVENTORY."""
    return click.option(
        "--local",
        is_flag=True,
        help="Use the embedded one-node inventory for this machine instead of a file.",
    )(func)


def inventory_and_command(
    inventory: str | None, command: tuple[str, ...], local: bool, slurm: bool
) -> tuple[Inventory, tuple[str, ...]]:
    """The inventory and ``COMMAND...`` as given; with ``--local`` the first word is the command's.

    Raises:
        click.UsageError: No command was given, or both an inventory file and --local.
    """
    if local and inventory is not None:
        if inventory.endswith((".yaml", ".yml")) and os.path.isfile(inventory):
            raise click.UsageError("give an inventory file or --local, not both")
        return choose_inventory(None, local, slurm), (inventory, *command)
    if not command:
        raise click.UsageError("Missing argument 'COMMAND...'.")
    return choose_inventory(inventory, local, slurm), command


def _check_sensors(ctx: click.Context, param: click.Parameter, value: str) -> str:
    why = sensors_problem(value)
    if why is not None:
        raise click.BadParameter(why)
    return value


def telemetry_options(func: F) -> F:
    """Add the sampler's options (``--sensors``, rates, ``--prometheus-port``).

    They arrive as ``telemetry_sensors``, ``telemetry_rate_hz``, ``power_rate_hz``,
    ``energy_rate_hz`` and ``prometheus_port`` (``TrainConfig``'s names); ``--sensors``
    is checked here, so a typo is a usage error before anything starts.
    """
    for option in reversed(
        [
            click.option(
                "--sensors",
                "telemetry_sensors",
                default="auto",
                show_default=True,
                callback=_check_sensors,
                help="auto (whatever each node has), host, nvml or host,nvml.",
            ),
            click.option(
                "--telemetry-rate-hz",
                type=float,
                default=10.0,
                show_default=True,
                help="Full readings per second on every node.",
            ),
            click.option(
                "--power-rate-hz",
                type=float,
                default=0.0,
                show_default=True,
                help="GPU instant-power readings per second, up to 50; 0: with every sample.",
            ),
            click.option(
                "--energy-rate-hz",
                type=float,
                default=DEFAULT_ENERGY_RATE_HZ,
                show_default=True,
                help=(
                    "GPU energy counter readings per second, taken with full readings "
                    "and always with the first and the last, so a run's energy stays "
                    "exact; 0: with every full reading. The counter is cumulative, and "
                    "a read costs about 4 ms per GPU on an H200 (8 GPUs at 10 Hz: a "
                    "third of every tick); the report spreads it over the power samples."
                ),
            ),
            click.option(
                "--prometheus-port",
                type=int,
                default=0,
                show_default=True,
                help=(
                    "Serve each node's newest readings at http://NODE_IP:PORT/metrics, "
                    "on the node's cluster address only, to requests bearing the "
                    "cluster token (loopback only under ray.auth: none); 0: off."
                ),
            ),
        ]
    ):
        func = option(func)
    return func


def telemetry_from(
    *,
    telemetry_sensors: str,
    telemetry_rate_hz: float,
    power_rate_hz: float,
    prometheus_port: int,
    energy_rate_hz: float,
) -> TelemetryOptions:
    """``telemetry_options``' values, as a command gets them, as checked options.

    A command passes on what it did not name itself: ``telemetry_from(**options)``.

    Raises:
        RtkError: A value cannot work (named as its flag).
    """
    return TelemetryOptions(
        sensors=telemetry_sensors,
        rate_hz=telemetry_rate_hz,
        power_rate_hz=power_rate_hz,
        prometheus_port=prometheus_port,
        energy_rate_hz=energy_rate_hz,
    ).check()


def _run_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A run id names one directory inside --output-dir: no path, nothing unprintable."""
    if value is not None and (value in ("", ".", "..") or "/" in value or not value.isprintable()):
        raise click.BadParameter(
            f"got {value!r}; give a directory name (no '/', not '.' or '..'): the run "
            "directory is OUTPUT_DIR/RUN_ID"
        )
    return value


DEFAULT_OUTPUT_DIR = "~/rtk-runs"  # --output-dir's default: where runs go on the nodes


def output_options(func: F) -> F:
    """Add ``--output-dir`` and ``--run-id`` (the run directory is OUTPUT_DIR/RUN_ID)."""
    func = click.option(
        "--run-id",
        default=None,
        callback=_run_id,
        help="Name of the run directory (default: cluster-time).",
    )(func)
    return click.option(
        "--output-dir",
        default=DEFAULT_OUTPUT_DIR,
        show_default=True,
        callback=absolute_output_dir,
        help="Where run directories go, as a path on the nodes (the head's at least); "
        "a relative one is taken from the current directory.",
    )(func)


def absolute_output_dir(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A relative --output-dir, made absolute from here.

    The job and its workers run in directories of Ray's own (an unpacked copy of
    the working directory, a worker's session directory): a relative path there
    would put the run where nothing reads it and Ray later deletes it. ``~`` stays
    as given, for the node to expand.
    """
    if value.startswith("~") or os.path.isabs(value):
        return value
    return os.path.abspath(value)


def choose_inventory(inventory: str | None, local: bool, slurm: bool = False) -> Inventory:
    """The file given, or ``$RTK_INVENTORY``, or the embedded default with ``--local``.

    With ``slurm``, the inventory becomes the cluster of the SLURM allocation this
    runs in (``toolkit.slurm.allocation``).
    """
    if inventory and local:
        raise click.UsageError("give an inventory file or --local, not both")
    if local and slurm:
        raise click.UsageError("--local and --slurm exclude each other")
    if local:
        return default_inventory()
    path = inventory or os.environ.get("RTK_INVENTORY")
    if not path:
        raise click.UsageError(
            "give an inventory file (see inventory.example.yaml), set RTK_INVENTORY, "
            "or use --local for this machine alone"
        )
    inv = load_inventory(path)
    if slurm:
        from toolkit.slurm.allocation import read_allocation, slurm_inventory

        return slurm_inventory(inv, read_allocation())
    return inv


def print_json(data: Any) -> None:
    """Print data as indented JSON on stdout."""
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


class ConsoleReporter:
    """Progress lines on stderr: elapsed seconds, node, message (``--verbose``'s view)."""

    def __init__(
        self,
        quiet: bool = False,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock
        self.began = clock()
        self.quiet = quiet
        self.stream = stream

    def _line(self, who: str, message: str) -> None:
        if not self.quiet:
            elapsed = self.clock() - self.began
            line = f"[{elapsed:6.1f}s] {who:<14} {message}"
            if self.stream is None:
                click.echo(line, err=True)
                sys.stderr.flush()
            else:
                self.stream.write(line + "\n")
                self.stream.flush()

    def node(self, name: str, message: str) -> None:
        """Print a node's progress."""
        self._line(name, message)

    def detail(self, name: str, text: str) -> None:
        """Print the text behind a node's failure, each line marked ``|``."""
        for line in text.splitlines():
            self._line(name, f"| {line}")

    def info(self, message: str) -> None:
        """Print the cluster's progress."""
        self._line("cluster", message)

    def phase(self, name: str, phase: Phase, detail: str = "") -> None:
        """The node lines say it already."""


VERBOSE_HELP = "Print every node's progress line (default: counts per phase, failures grouped)."


def verbose_option(func: F) -> F:
    """Add ``--verbose``/``-v`` (every node's line instead of counts and groups)."""
    return click.option("--verbose", "-v", is_flag=True, help=VERBOSE_HELP)(func)
