"""--power-policy, --max-slowdown and --eta, as a command parses them."""

from __future__ import annotations

from typing import Any

import click
import pytest
from click.testing import CliRunner

from toolkit.cli.options.power_options import power_options, power_settings
from toolkit.power.settings import OPTIMIZE, PowerSettings


@click.command()
@power_options
def command(**options: Any) -> None:
    click.echo(repr(power_settings(**options)))


def test_the_options_make_the_jobs_settings() -> None:
    runner = CliRunner()
    plain = runner.invoke(command, [])
    assert plain.exit_code == 0 and plain.output.strip() == repr(PowerSettings())
    asked = runner.invoke(command, ["--power-policy", "optimize", "--max-slowdown", "0.1",
                                    "--eta", "0.5"])  # fmt: skip
    expected = PowerSettings(policy=OPTIMIZE, max_slowdown=0.1, eta=0.5)
    assert asked.exit_code == 0 and asked.output.strip() == repr(expected)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--power-policy", "greedy"], "'greedy' is not one of"),
        (["--power-policy", "optimize", "--max-slowdown", "1"], "--max-slowdown"),
        (["--eta", "0.5"], "--eta weighs optimize's choice: add --power-policy optimize"),
        (["--power-policy", "stragglers", "--eta", "0.5"], "add --power-policy optimize"),
    ],
)
def test_a_wrong_option_is_named(args: list[str], said: str) -> None:
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 2 and said in result.output
