"""``--on-stall`` and ``--stall-timeout-s``: how ``rtk train`` and ``rtk torchrun`` watch a run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from toolkit.stall.detector import FLOOR_S
from toolkit.stall.settings import POLICIES, REPORT, STALL_EXIT, WatchSettings

F = TypeVar("F", bound=Callable[..., Any])

ON_STALL_HELP = (
    "When no rank finishes a step for the stall timeout, every rank's stack is read "
    "(py-spy, else faulthandler) and the suspects named in the log and in stall.json; "
    "then the POLICY: report (keep waiting), abort (stop the job on every node, exit "
    f"{STALL_EXIT}), restart-excluding (as abort, then the run resumes from its last "
    "checkpoint without the suspect nodes)."
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
