"""``TelemetryOptions``: declared once, the same JSON for writer and reader, checked early."""

from __future__ import annotations

import pytest

from toolkit.errors import RtkError
from toolkit.telemetry.options import TelemetryOptions
from toolkit.train.config import TrainConfig


def test_telemetry_options_round_trip_and_name_unknown_keys() -> None:
    options = TelemetryOptions("host,nvml", 20.0, 50.0, 9400, 5.0, 30.0)
    assert TelemetryOptions.from_json(options.to_json()) == options
    assert TelemetryOptions.from_json({}) == TelemetryOptions()
    with pytest.raises(
        RtkError, match=r"unknown telemetry option\(s\): rate; valid: sensors, rate_hz,"
    ):
        TelemetryOptions.from_json({"rate": 5})


def test_telemetry_options_check_names_every_bad_value() -> None:
    assert TelemetryOptions().check() == TelemetryOptions()
    bad = TelemetryOptions(sensors="nvm", rate_hz=0, power_rate_hz=60, prometheus_port=-1)
    problems = bad.problems()
    assert len(problems) == 4
    assert problems[0].startswith("--sensors 'nvm' is not valid")
    with pytest.raises(RtkError, match="--telemetry-rate-hz must be above 0"):
        bad.check()


def test_energy_rate_round_trips_zero_and_is_checked() -> None:
    every = TelemetryOptions(energy_rate_hz=0.0)  # with every full reading
    assert TelemetryOptions.from_json(every.to_json()) == every
    # null is "not given" (the default), not 0 (with every full reading)
    default_hz = TelemetryOptions().energy_rate_hz
    assert TelemetryOptions.from_json({"energy_rate_hz": None}).energy_rate_hz == default_hz != 0
    for bad in (-1.0, 60.0):
        [problem] = TelemetryOptions(energy_rate_hz=bad).problems()
        assert problem.startswith("--energy-rate-hz must be 0 (with every full reading) to 50")
    config = TrainConfig(run_dir="r", energy_rate_hz=0.5)
    assert config.telemetry_options().energy_rate_hz == 0.5
    with pytest.raises(RtkError, match="--energy-rate-hz"):
        TrainConfig(run_dir="r", energy_rate_hz=-1).check()


def test_train_config_checks_its_telemetry_options() -> None:
    config = TrainConfig(run_dir="r", telemetry_sensors="gpu")
    assert config.telemetry_options().sensors == "gpu"
    with pytest.raises(RtkError, match="--sensors 'gpu' is not valid"):
        config.check()
