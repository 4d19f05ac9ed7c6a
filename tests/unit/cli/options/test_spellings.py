"""``rtk train`` takes the seed guides' underscore flags (``--model_size``) as its own."""

from __future__ import annotations

import re
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from toolkit.cli import cli
from toolkit.cli.cmd_train import train_cmd
from toolkit.cli.options.spellings import UnderscoreSpellings, as_typed, dashed
from toolkit.flows.ray_address import AddressKind

# The train_gpt.py command lines of the multi-node Ray guide rtk grew from, as written
# there (the first is its "Run Training" step; the others its barrier and
# out-of-memory examples).
SEED_LINES = [
    [
        *("--model_size", "350M", "--batch_size", "2", "--gradient_accumulation_steps", "4"),
        *("--precision", "bf16", "--max_steps", "2000", "--num_workers", "0"),
        *("--resources_per_worker", '{"GPU": 1, "CPU": 4}', "--ray_address", "auto"),
        *("--save_steps", "500"),
    ],
    ["--model_size", "8B", "--batch_size", "1", "--gradient_accumulation_steps", "2"],
    ["--model_size", "350M", "--num_workers", "0", "--barrier_every", "10"],
    ["--batch_size", "1", "--gradient_accumulation_steps", "4", "--gradient_checkpointing"],
    ["--ray_address", "ray://10.0.0.1:10001"],
]


def params(args: list[str]) -> dict[str, Any]:
    """What ``rtk train ARGS`` parses to (nothing runs)."""
    with train_cmd.make_context("train", list(args)) as ctx:
        return dict(ctx.params)


def dashed_line(args: list[str]) -> list[str]:
    """The same line with rtk's dashed flags (values untouched)."""
    return [dashed(a) if a.startswith("--") else a for a in args]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, ["train", *args], terminal_width=100)


@pytest.mark.parametrize("line", SEED_LINES, ids=lambda line: " ".join(line[:2]))
def test_each_seed_flag_parses_as_the_dashed_option(line: list[str]) -> None:
    assert any("_" in a for a in line if a.startswith("--"))
    assert params(line) == params(dashed_line(line))


def test_the_seed_values_mean_what_the_guide_says() -> None:
    got = params(SEED_LINES[0])
    assert got["model_size"] == "350M"
    assert (got["batch_size"], got["gradient_accumulation_steps"]) == (2, 4)
    assert (got["precision"], got["max_steps"], got["save_steps"]) == ("bf16", 2000, 500)
    assert got["num_workers"] == 0  # rtk's 0 is the guide's: one worker per GPU
    assert got["resources_per_worker"] == '{"GPU": 1, "CPU": 4}'
    assert got["ray_address"].kind is AddressKind.AUTO
    client = params(SEED_LINES[-1])["ray_address"]
    assert (client.kind, client.host, client.port) == (AddressKind.CLIENT, "10.0.0.1", 10001)


def test_the_equals_form_and_negated_flags() -> None:
    got = params(
        ["--max_steps=7", '--resources_per_worker={"CPU": 2}', "--no_telemetry", "--run_id=a_b"]
    )
    assert (got["max_steps"], got["resources_per_worker"]) == (7, '{"CPU": 2}')
    assert got["telemetry"] is False
    assert got["run_id"] == "a_b"  # values keep their underscores


def test_a_flag_spelled_both_ways_is_one_option_given_twice() -> None:
    assert params(["--max_steps", "5", "--max-steps", "6"])["max_steps"] == 6
    assert params(["--max-steps", "6", "--max_steps", "5"])["max_steps"] == 5


def test_an_unknown_underscore_flag_is_named_as_typed() -> None:
    done = invoke("--max_stepz", "3")
    assert done.exit_code == 2
    assert "No such option '--max_stepz'. (Did you mean one of: '--max-steps'" in done.output
    done = invoke("--learning_rat", "1e-4")
    assert "No such option '--learning_rat'" in done.output
    assert invoke("--bogus_flag").output.splitlines()[-1] == "Error: No such option '--bogus_flag'."
    # A dashed unknown flag reads as click always wrote it.
    assert "No such option '--bogus-flag'." in invoke("--bogus-flag").output


def test_a_missing_value_names_the_option() -> None:
    done = invoke("--max_steps")
    assert done.exit_code == 2
    assert "'--max-steps' requires an argument" in done.output


def test_help_lists_every_option_once_dashed_and_says_underscores_work() -> None:
    done = invoke("--help")
    assert done.exit_code == 0, done.output
    text = done.output
    assert "Options may be spelled with underscores too" in text
    assert "--model_size 350M --batch_size 2" in text  # the example, above the options
    options_part = text[text.index("\nModel:") :]
    listed = re.findall(r"^\s+(--[\w-]+)", options_part, re.MULTILINE)
    assert "--model-size" in listed and "--ray-address" in listed
    assert len(listed) == len(set(listed))
    assert not re.search(r"--[a-z]+_[a-z]", options_part)


def test_ray_address_is_checked_when_parsed() -> None:
    done = invoke("--ray_address", "10.0.0.1", "--dry-run")
    assert done.exit_code == 2
    assert "Invalid value for '--ray-address'" in done.output
    assert "a GCS address needs its port" in done.output
    done = invoke("--ray-address", "grpc://h:1")
    assert "unknown scheme 'grpc://'" in done.output


def test_the_mechanism_is_generic_and_leaves_values_and_arguments_alone() -> None:
    @click.command(cls=UnderscoreSpellings)
    @click.argument("words", nargs=-1)
    @click.option("--some-thing", default="")
    @click.option("--on/--off", default=True)
    def command(words: tuple[str, ...], some_thing: str, on: bool) -> None:
        click.echo(f"{words} {some_thing} {on}")

    done = CliRunner().invoke(command, ["--some_thing", "x_y", "--off", "a_b", "--", "--c_d"])
    assert done.exit_code == 0, done.output
    assert done.output == "('a_b', '--c_d') x_y False\n"


def test_as_typed_finds_the_spelling_given_before_the_end_of_options() -> None:
    assert as_typed("--max-step", ["--max_step=3"]) == "--max_step"
    assert as_typed("--max-step", ["--", "--max_step"]) == "--max-step"
    assert as_typed("--max-step", ["--max-step"]) == "--max-step"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[" * 100_000, "give a JSON object like"),  # json's RecursionError
        ('{"GPU": NaN}', "amounts are finite numbers >= 0; got {'GPU': nan}"),
        ('{"GPU": -1}', "amounts are finite numbers >= 0; got {'GPU': -1.0}"),
        ("[1]", "give a JSON object like"),
    ],
)
def test_a_bad_resources_per_worker_is_a_usage_error(value: str, message: str) -> None:
    done = invoke("--local", "--dry-run", "--resources-per-worker", value)
    assert done.exit_code == 2, done.output
    assert "Invalid value for --resources-per-worker" in done.output
    assert message in done.output


@pytest.mark.parametrize("run_id", ["../up", "a/b", "..", ".", "", "a\nb"])
def test_a_run_id_is_one_directory_name(run_id: str) -> None:
    done = invoke("--local", "--dry-run", "--run-id", run_id)
    assert done.exit_code == 2, done.output
    assert "Invalid value for '--run-id'" in done.output
    assert "give a directory name (no '/', not '.' or '..')" in done.output
