"""``--power-policy``, ``--max-slowdown`` and ``--eta``: GPU power limits chosen while a run goes.

On ``rtk train``, ``rtk torchrun`` and ``rtk telemetry record`` (runs whose steps rtk
sees in their markers); the job driver's ``toolkit.power.driver`` acts on them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from toolkit.power.settings import MAX_SLOWDOWN, MEASURE, POLICIES, PowerSettings

F = TypeVar("F", bound=Callable[..., Any])

POLICY_HELP = (
    "GPU power limits while the run goes: measure (change nothing); optimize (after "
    "the warm-up, step every GPU through limits from the top down, a few steps each, "
    "and keep the one with the least energy per step within --max-slowdown, or the "
    "least Zeus cost with --eta); stragglers (lower the limits of GPUs that wait for "
    "the slowest rank, raised back when steps slow down). Needs root on the nodes; "
    "the limits are put back at the end (after a crash: the next rtk up). "
    "Decisions: power.jsonl and the report."
)

POWER_OPTIONS = [
    click.option(
        "--power-policy",
        type=click.Choice(POLICIES),
        metavar="POLICY",
        default=MEASURE,
        show_default=True,
        help=POLICY_HELP,
    ),
    click.option(
        "--max-slowdown",
        type=click.FloatRange(min=0, max=1, max_open=True),
        metavar="SHARE",
        default=MAX_SLOWDOWN,
        show_default=True,
        help="The longest a step may get under the power policy, as a share of the "
        "fastest (0.05: 5%).",
    ),
    click.option(
        "--eta",
        type=click.FloatRange(min=0, max=1),
        metavar="WEIGHT",
        help="With --power-policy optimize: minimise Zeus's cost eta * energy + "
        "(1 - eta) * max_power * time instead (1: energy only, 0: time only).",
    ),
]
"""The options, in order (``rtk train`` puts them among its own)."""


def power_options(func: F) -> F:
    """Add ``--power-policy``, ``--max-slowdown`` and ``--eta``.

    They arrive as ``power_policy``, ``max_slowdown`` and ``eta``; ``power_settings``
    makes them one ``PowerSettings``.
    """
    for option in reversed(POWER_OPTIONS):
        func = option(func)
    return func


def power_settings(power_policy: str, max_slowdown: float, eta: float | None) -> PowerSettings:
    """The options as the job's ``PowerSettings``.

    Raises:
        click.UsageError: A setting PowerSettings refuses (``--eta`` without optimize).
    """
    try:
        return PowerSettings(policy=power_policy, max_slowdown=max_slowdown, eta=eta)
    except ValueError as e:
        raise click.UsageError(str(e)) from e
