"""``--on-stall`` and ``--stall-timeout-s``: how ``rtk train`` and ``rtk torchrun`` watch a run.

And ``rtk stall-check``'s RUN: the run directory it names (``run_dir_of``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from toolkit.cli.options.decorators import DEFAULT_OUTPUT_DIR
from toolkit.stall.detector import FLOOR_S
from toolkit.stall.settings import POLICIES, REPORT, STALL_EXIT, WatchSettings
from toolkit.state.cluster_state import RecordedRun

F = TypeVar("F", bound=Callable[..., Any])

ON_STALL_HELP = (
    "When no rank finishes a step for the stall timeout, every rank's stack is read "
    "(py-spy, else faulthandler) and the suspects named in the log and in stall.json; "
    "then the POLICY: report (keep waiting), abort (stop the job on every node, exit "
    f"{STALL_EXIT}), restart-excluding (rtk train: the run resumes from its last "
    "checkpoint without the suspect nodes, down to the inventory's min_nodes)."
)
TIMEOUT_HELP = (
    "Declare a stall after this many seconds without a finished step.  [default: learned: "
    "10x the median step, 2x the longest recent one, at least 60 s; 10 min before "
    "the second step]"
)


STALL_OPTIONS = [
    click.option(
        "--on-stall",
        type=click.Choice(POLICIES),
        metavar="POLICY",
        default=REPORT,
        show_default=True,
        help=ON_STALL_HELP,
    ),
    click.option(
        "--stall-timeout-s",
        type=click.FloatRange(min=0, min_open=True),
        metavar="SECONDS",
        help=TIMEOUT_HELP,
    ),
    click.option(
        "--stall-floor-s",
        type=click.FloatRange(min=0, min_open=True),
        metavar="SECONDS",
        default=FLOOR_S,
        show_default=True,
        help="The least a learned stall timeout may be, in seconds.",
    ),
]
"""The options, in order (``rtk train`` puts them among its own)."""


def stall_options(func: F) -> F:
    """Add ``--on-stall``, ``--stall-timeout-s`` and ``--stall-floor-s``.

    They arrive as ``on_stall``, ``stall_timeout_s`` and ``stall_floor_s``;
    ``stall_settings`` makes them one ``WatchSettings``.
    """
    for option in reversed(STALL_OPTIONS):
        func = option(func)
    return func


def stall_settings(
    on_stall: str, stall_timeout_s: float | None, stall_floor_s: float = FLOOR_S
) -> WatchSettings:
    """The options as the job's ``WatchSettings``."""
    return WatchSettings(policy=on_stall, timeout_s=stall_timeout_s, floor_s=stall_floor_s)


def run_dir_of(run: str, runs: Sequence[RecordedRun] = ()) -> str:
    """The run directory ``rtk stall-check``'s RUN names, as the nodes see it.

    A path (a ``/`` in it, ``~`` first, or ``.`` or ``..``) is taken as given, a relative
    one from the current directory (as ``--output-dir`` is; a job runs elsewhere). A
    bare run id is the newest run ``rtk train`` recorded with that id (``runs``, the
    cluster's state), else ``~/rtk-runs/RUN_ID`` (``--output-dir``'s default).

    Raises:
        click.BadParameter: RUN is empty.
    """
    if not run.strip():
        raise click.BadParameter("give a run directory or a run id", param_hint="RUN")
    if "/" in run or run.startswith("~") or run in (".", ".."):
        return run if run.startswith("~") or os.path.isabs(run) else os.path.abspath(run)
    recorded = [r for r in runs if r.run_id == run]
    if recorded:
        return max(recorded, key=lambda r: r.at_wall_s).run_dir
    return f"{DEFAULT_OUTPUT_DIR}/{run}"


def inventory_and_run(
    inventory: str | None, run: str | None, local: bool
) -> tuple[str | None, str]:
    """INVENTORY and RUN as meant: with ``--local`` or ``$RTK_INVENTORY`` a lone word is RUN.

    Raises:
        click.UsageError: No RUN.
    """
    if run is None and inventory is not None:
        from_env = bool(os.environ.get("RTK_INVENTORY")) and not os.path.isfile(inventory)
        if local or from_env:
            return None, inventory
    if run is None:
        raise click.UsageError(
            "give the RUN to check: its run directory as the nodes see it, or its run id"
        )
    return inventory, run
