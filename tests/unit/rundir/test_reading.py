"""A sensor's reading: typed columns, and the JSON row the trace and the endpoint see."""

from __future__ import annotations

import dataclasses

import pytest

from toolkit.rundir.reading import NUMBER_FIELDS, Reading


def test_only_the_readings_a_device_supports_are_in_its_row() -> None:
    gpu = Reading("GPU-abc", "gpu", "nvml_instant", power_w=301.5, sm_clock_mhz=1980)
    assert gpu.to_json() == {
        "device": "GPU-abc",
        "kind": "gpu",
        "power_source": "nvml_instant",
        "power_w": 301.5,
        "sm_clock_mhz": 1980,
    }
    host = Reading("host", "host", cpu_util_pct=12.5, extra={"zone": "x"})
    assert host.to_json() == {"device": "host", "kind": "host", "cpu_util_pct": 12.5, "zone": "x"}


def test_every_number_column_is_a_field_and_a_reading_cannot_be_changed() -> None:
    names = {f.name for f in dataclasses.fields(Reading)}
    assert set(NUMBER_FIELDS) <= names and "power_source" not in NUMBER_FIELDS
    reading = Reading("GPU-abc", "gpu_power", power_w=100.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        reading.power_w = 1.0  # type: ignore[misc]
