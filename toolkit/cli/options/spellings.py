"""Underscore spellings of a command's options: ``--model_size`` for ``--model-size``.

Scripts written for Ray's examples (``train_gpt.py --model_size 350M --batch_size 2``)
spell their flags with underscores; rtk's options are dashed. A command with
``UnderscoreSpellings`` in its bases accepts both, through click's own token
normalisation (``Context.token_normalize_func``): the option name of every token the
parser reads as an option has its underscores turned into dashes before it is looked
up, so ``--a_b``, ``--a_b=value`` and ``--no_a_b`` are the options ``--a-b`` and
``--no-a-b`` themselves. Nothing is added to the command's parameters, so ``--help``
lists each option once, dashed, and an option spelled both ways is one option given
twice (click's rule: the last value wins).

What the normalisation leaves alone: option values (``--run-id my_run`` keeps its
underscore) and arguments. It also applies to the values of ``click.Choice`` options
(both the choices and what is given), so a command using this must not have two
choices that differ only in ``_`` against ``-``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

END_OF_OPTIONS = "--"


def dashed(token: str) -> str:
    """``token`` with its underscores as dashes (``model_size`` -> ``model-size``)."""
    return token.replace("_", "-")


class UnderscoreSpellings(click.Command):
    """A command whose options may also be written with underscores instead of dashes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.context_settings.setdefault("token_normalize_func", dashed)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse as click does; an unknown option is named as it was typed.

        Raises:
            click.NoSuchOption: An option this command does not have, named in the
                spelling given (``--modle_size``), with click's suggestions.
        """
        given = list(args)  # click's parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as e:
            typed = as_typed(e.option_name, given)
            if typed == e.option_name:
                raise
            raise click.NoSuchOption(typed, possibilities=e.possibilities, ctx=ctx) from None


def as_typed(option_name: str, args: Sequence[str]) -> str:
    """The spelling in ``args`` of the option that normalises to ``option_name``.

    ``option_name`` itself when no option before ``--`` normalises to it (it was typed
    as it is).
    """
    for arg in args:
        if arg == END_OF_OPTIONS:
            break
        name = arg.split("=", 1)[0]
        if name.startswith("--") and dashed(name) == option_name:
            return name
    return option_name
