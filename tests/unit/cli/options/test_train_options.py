"""``rtk train``'s trainer options: the CLI's defaults are ``TrainConfig``'s, --compile."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from toolkit.cli import cli
from toolkit.cli.cmd_train import train_cmd
from toolkit.train.config import TrainConfig

# Options whose value the CLI turns into the field's (JSON text -> a dict).
PARSED = {"resources_per_worker"}


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """rtk's state directory, apart from the real one (a dry run must not write it)."""
    path = tmp_path / "state"
    monkeypatch.setenv("RTK_STATE_DIR", str(path))
    monkeypatch.chdir(tmp_path)
    return path


def _rtk(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _dry_run_config(*args: str) -> TrainConfig:
    """The ``TrainConfig`` a dry run of ``rtk train --local ARGS`` would submit."""
    done = _rtk("train", "--local", "--dry-run", "--no-preflight", "--run-id", "r", *args)
    assert done.exit_code == 0, done.output
    line = next(x for x in done.output.splitlines() if "entrypoint: " in x)
    entrypoint = shlex.split(line.split("entrypoint: ", 1)[1])
    assert entrypoint[1:3] == ["-m", "toolkit.train.job"]
    return TrainConfig.from_json(json.loads(entrypoint[3]))


def test_every_trainer_option_defaults_to_the_configs_default() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    options = [
        p
        for p in train_cmd.params
        if isinstance(p, click.Option) and p.name in defaults and p.name not in PARSED
    ]
    assert {"compile", "compile_backend", "max_steps", "precision"} <= {p.name for p in options}
    # The values the command gets when nothing is given (click's, after parsing).
    parsed = train_cmd.make_context("train", [], resilient_parsing=True).params
    given = {str(p.name): parsed[str(p.name)] for p in options}
    differing = {
        name: (value, defaults[name]) for name, value in given.items() if value != defaults[name]
    }
    assert differing == {}


def test_the_compile_default_is_the_configs_and_compile_options_reach_the_job() -> None:
    assert _dry_run_config().compile == TrainConfig(run_dir="r").compile
    config = _dry_run_config("--compile", "on", "--compile-backend", "aot_eager")
    assert (config.compile, config.compile_backend) == ("on", "aot_eager")
    assert _dry_run_config("--compile", "off").compile == "off"


def test_a_compile_mode_not_offered_is_refused_naming_the_choices() -> None:
    done = _rtk("train", "--local", "--dry-run", "--compile", "maybe")
    assert done.exit_code == 2
    assert "--compile" in done.output and "'auto', 'on', 'off'" in done.output


def test_the_compile_backend_is_a_hidden_aid() -> None:
    done = _rtk("train", "--help")
    assert "--compile [auto|on|off]" in done.output
    assert "--compile-backend" not in done.output
