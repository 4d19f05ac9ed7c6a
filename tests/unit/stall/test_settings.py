"""How a run is watched, as the job's configuration carries it; bad values named."""

from __future__ import annotations

import pytest

from toolkit.stall.detector import FLOOR_S
from toolkit.stall.settings import ABORT, RESTART_EXCLUDING, WatchSettings


def test_settings_go_through_json_unchanged() -> None:
    settings = WatchSettings(policy=RESTART_EXCLUDING, timeout_s=30.0, floor_s=2.0)
    assert WatchSettings.from_json(settings.to_json()) == settings
    assert WatchSettings.from_json({}) == WatchSettings()
    assert WatchSettings().floor_s == FLOOR_S and WatchSettings().timeout_s is None


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"policy": "reboot"}, "--on-stall reboot: choose report, abort, restart-excluding"),
        ({"policy": ABORT, "timeout_s": 0}, "--stall-timeout-s must be a positive number"),
        ({"timeout_s": "soon"}, "--stall-timeout-s must be a positive number"),
        ([], "stall settings: expected an object"),
    ],
)
def test_bad_settings_say_what_is_wrong(data: object, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        WatchSettings.from_json(data)
