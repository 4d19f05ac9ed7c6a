"""A click group whose subcommands are imported when used, not when ``rtk`` starts.

Every ``rtk`` call used to import all commands' modules, and through them the
flows, preflight, telemetry, sandbox and profiling code: about half a second before
any work, paid by each of an sbatch script's several calls. Now ``rtk up`` imports
what ``up`` needs; ``rtk --help`` still lists every command (it imports them all).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click


class LazyGroup(click.Group):
    """A group of commands named ``"module:attribute"``, each imported on first use."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, str], **kwargs: Any) -> None:
        """``lazy_commands``: command name -> ``"package.module:attribute"``."""
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command, the unloaded ones too, sorted (as click's own groups list them)."""
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command ``cmd_name``, its module imported now if it was not yet."""
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            module_name, _, attribute = self.lazy_commands[cmd_name].partition(":")
            command = getattr(importlib.import_module(module_name), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy_commands[cmd_name]} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)
