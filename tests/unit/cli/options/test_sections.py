"""``rtk train --help``: every option explained, in named sections."""

from __future__ import annotations

import re

import click
from click.testing import CliRunner

from toolkit.cli import cli
from toolkit.cli.cmd_train import train_cmd
from toolkit.cli.options.sections import OTHER, SectionedCommand, TrainCommand

SECTIONS = [
    "Model",
    "Data",
    "Optimisation",
    "Parallelism and strategy",
    "Checkpoints and failures",
    "Run directory and output",
    "Telemetry",
    "Power limits",
    "Preflight",
    "Cluster and inventory",
]


def _options(command: click.Command) -> list[click.Option]:
    """The options --help shows (hidden ones, such as testing aids, are not)."""
    return [
        p
        for p in command.params
        if isinstance(p, click.Option) and p.name != "help" and not p.hidden
    ]


def test_hidden_options_stay_out_of_the_help() -> None:
    hidden = [p for p in train_cmd.params if isinstance(p, click.Option) and p.hidden]
    assert "straggle" in {p.name for p in hidden}
    assert "--straggle" not in _help()


def _sections(text: str) -> dict[str, str]:
    """Section title -> its lines, from click's help text (titles end in ':' at column 0)."""
    parts = re.split(r"^(\S[^\n]*):\n", text, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _help() -> str:
    done = CliRunner().invoke(cli, ["train", "--help"], terminal_width=100)
    assert done.exit_code == 0, done.output
    return done.output


def test_every_train_option_belongs_to_a_section() -> None:
    assert isinstance(train_cmd, TrainCommand)
    assert train_cmd.unmapped() == []


def test_train_help_shows_the_sections_in_order_and_each_option_once() -> None:
    sections = _sections(_help())
    assert [t for t in sections if t in SECTIONS] == SECTIONS
    # Only --help is left for "Other".
    assert re.findall(r"--[a-z-]+", sections[OTHER]) == ["--help"]
    text = "".join(sections[t] for t in SECTIONS)
    for option in _options(train_cmd):
        for flag in [*option.opts, *option.secondary_opts]:
            shown = re.search(rf"^  {re.escape(flag)}\b|/ {re.escape(flag)}\b", text, re.M)
            assert shown, f"{flag} is not shown in a section"
    assert "--model-size" in sections["Model"]
    assert "--zero-stage" in sections["Parallelism and strategy"]
    assert "--save-steps" in sections["Checkpoints and failures"]
    assert "--sensors" in sections["Telemetry"]
    assert "--no-preflight" in sections["Preflight"]
    assert "--power-policy" in sections["Power limits"]
    assert "--slurm" in sections["Cluster and inventory"]


def test_every_train_option_is_explained_with_its_unit() -> None:
    for option in _options(train_cmd):
        name = str(option.name)
        assert option.help and len(option.help) >= 20, f"--{name}: explain it"
        if name.endswith("_s"):
            assert "second" in option.help, f"--{name}: say it is in seconds"
        if name.endswith("_hz"):
            assert "per second" in option.help, f"--{name}: say it is per second"
        if name.endswith("_mb"):
            assert "MB" in option.help, f"--{name}: say it is in MB"
        # A default of 0 that means "off" or "automatic" says so (a seed is just a number).
        numeric = option.type in (click.INT, click.FLOAT) and name != "seed"
        if option.default == 0 and numeric:
            assert "0:" in option.help or "0 " in option.help, f"--{name}: what does 0 mean?"


def test_an_unmapped_option_is_reported_and_shown_under_other() -> None:
    class Sectioned(SectionedCommand):
        SECTIONS = {"First": ("b",), "Second": ("a",)}

    @click.command("x", cls=Sectioned)
    @click.option("--a", help="Option a.")
    @click.option("--b", help="Option b.")
    @click.option("--c", help="Option c.")
    def command(a: str, b: str, c: str) -> None:
        """A command."""

    assert isinstance(command, Sectioned)
    assert command.unmapped() == ["c"]
    done = CliRunner().invoke(command, ["--help"])
    sections = _sections(done.output)
    assert list(sections)[-3:] == ["First", "Second", OTHER]
    assert "--b" in sections["First"] and "--a" in sections["Second"]
    assert re.findall(r"--[a-z]+", sections[OTHER]) == ["--c", "--help"]
