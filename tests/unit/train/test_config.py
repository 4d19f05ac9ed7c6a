"""The trainer's options: the settings objects it holds, their flat spelling, its checks."""

from __future__ import annotations

import json

import pytest

from toolkit.errors import RtkError
from toolkit.power.settings import PowerSettings
from toolkit.stall.settings import WatchSettings
from toolkit.train.config import TrainConfig, option_names, option_type


def test_the_settings_are_objects_and_the_json_round_trips() -> None:
    config = TrainConfig(
        run_dir="/r",
        stall=WatchSettings(policy="abort", timeout_s=30.0),
        power=PowerSettings(policy="optimize", eta=0.5),
        resources_per_worker={"GPU": 1.0},
    )
    data = json.loads(json.dumps(config.to_json()))
    assert data["stall"]["policy"] == "abort" and data["power"]["eta"] == 0.5
    assert "on_stall" not in data and "power_policy" not in data
    assert TrainConfig.from_json(data) == config


def test_the_flat_options_of_the_command_line_and_a_sweep_fold_into_the_settings() -> None:
    flat = {"run_dir": "/r", "on_stall": "abort", "stall_timeout_s": 30.0}
    flat |= {"power_policy": "optimize", "max_slowdown": 0.1, "eta": None}
    config = TrainConfig.from_json(flat)
    assert config.stall == WatchSettings(policy="abort", timeout_s=30.0)
    assert config.power == PowerSettings(policy="optimize", max_slowdown=0.1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"on_stall": "panic"}, "--on-stall panic"),
        ({"stall_timeout_s": -1.0}, "timeout"),
        ({"eta": 0.5}, "--eta weighs optimize's choice"),
        ({"power_policy": "optimize", "max_slowdown": 2.0}, "--max-slowdown 2.0"),
        ({"on_stal": "abort"}, "unknown trainer option(s): on_stal"),
    ],
)
def test_a_setting_refused_is_one_error_naming_the_option(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(RtkError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainConfig.from_json({"run_dir": "/r", **options})


def test_every_flat_option_has_a_type_and_a_field_name_is_no_option() -> None:
    names = option_names()
    assert {"on_stall", "power_policy", "eta", "max_steps", "run_dir"} <= set(names)
    assert "stall" not in names and "power" not in names
    assert option_type("max_steps") is int and option_type("on_stall") is str
    assert option_type("eta") == float | None
    with pytest.raises(KeyError):
        option_type("power")
