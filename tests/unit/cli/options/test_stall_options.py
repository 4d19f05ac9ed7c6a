"""--on-stall, --stall-timeout-s and --stall-floor-s, as a command gets them."""

from __future__ import annotations

import click
from click.testing import CliRunner

from toolkit.cli.options.stall_options import stall_options, stall_settings
from toolkit.stall.settings import WatchSettings


@click.command()
@stall_options
def watched(on_stall: str, stall_timeout_s: float | None, stall_floor_s: float) -> None:
    click.echo(repr(stall_settings(on_stall, stall_timeout_s, stall_floor_s)))


def test_the_options_make_the_settings() -> None:
    done = CliRunner().invoke(watched, ["--on-stall", "abort", "--stall-timeout-s", "90"])
    assert done.exit_code == 0, done.output
    assert done.output.strip() == repr(WatchSettings(policy="abort", timeout_s=90.0))
    assert CliRunner().invoke(watched, []).output.strip() == repr(WatchSettings())


def test_a_bad_value_is_a_usage_error() -> None:
    assert CliRunner().invoke(watched, ["--on-stall", "reboot"]).exit_code == 2
    assert CliRunner().invoke(watched, ["--stall-timeout-s", "0"]).exit_code == 2
    assert CliRunner().invoke(watched, ["--stall-floor-s", "-1"]).exit_code == 2
