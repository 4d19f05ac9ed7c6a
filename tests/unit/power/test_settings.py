"""The power policy a user chose, as the job's configuration carries it."""

from __future__ import annotations

import pytest

from toolkit.power.settings import MEASURE, OPTIMIZE, STRAGGLERS, PowerSettings


def test_settings_go_through_json_unchanged() -> None:
    settings = PowerSettings(policy=OPTIMIZE, max_slowdown=0.1, eta=0.5, grid_step_w=50.0)
    assert PowerSettings.from_json(settings.to_json()) == settings
    assert PowerSettings.from_json({}) == PowerSettings()
    assert not PowerSettings().acts and PowerSettings(policy=STRAGGLERS).acts
    assert PowerSettings().policy == MEASURE


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"policy": "fastest"}, "--power-policy fastest"),
        ({"policy": "optimize", "max_slowdown": 1.5}, "--max-slowdown 1.5"),
        ({"policy": "optimize", "eta": -0.1}, "--eta -0.1"),
        ({"policy": "optimize", "warmup_steps": 0}, "warmup_steps must be at least 1"),
        ({"policy": "optimize", "grid_step_w": 0}, "grid_step_w must be positive"),
        ({"policy": "optimize", "eta": "much"}, "power settings:"),
        ({"policy": "stragglers", "eta": 0.5}, "--eta weighs optimize's choice"),
        ([], "expected an object"),
    ],
)
def test_a_bad_setting_is_named(data: object, named: str) -> None:
    with pytest.raises(ValueError, match=named.replace("(", r"\(")):
        PowerSettings.from_json(data)
