"""``--on-stall`` and ``--stall-timeout-s``: how ``rtk train`` and ``rtk torchrun`` watch a run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from toolkit.stall.settings import POLICIES, REPORT, STALL_EXIT, WatchSettings

F = TypeVar("F", bound=Callable[..., Any])

ON_STALL_HELP = (
    "When no rank finishes a step for the stall timeout, every rank's stack is read "
    "(py-spy, else faulthandler) and the suspects named in the log and in stall.json; "
    "then: report (keep waiting), abort (stop the job on every node, exit "
    f"{STALL_EXIT}), restart-excluding (as abort; the suspect nodes are named for "
    "rtk up --exclude)."
)
TIMEOUT_HELP = (
    "Declare a stall after this long without a finished step.  [default: learned: "
    "10x the median step, 2x the longest recent one, at least 60 s; 10 min before "
    "the second step]"
)


STALL_OPTIONS = [
    click.option(
        "--on-stall",
        type=click.Choice(POLICIES),
        default=REPORT,
        show_default=True,
        help=ON_STALL_HELP,
    ),
    click.option(
        "--stall-timeout-s", type=click.FloatRange(min=0, min_open=True), help=TIMEOUT_HELP
    ),
]
"""The options, in order (``rtk train`` puts them among its own)."""


def stall_options(func: F) -> F:
    """Add ``--on-stall`` and ``--stall-timeout-s``.

    They arrive as ``on_stall`` and ``stall_timeout_s``; ``stall_settings`` makes them
    one ``WatchSettings``.
    """
    for option in reversed(STALL_OPTIONS):
        func = option(func)
    return func


def stall_settings(on_stall: str, stall_timeout_s: float | None) -> WatchSettings:
    """The options as the job's ``WatchSettings``."""
    return WatchSettings(policy=on_stall, timeout_s=stall_timeout_s)
