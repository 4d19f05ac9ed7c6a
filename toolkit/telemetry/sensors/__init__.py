"""Sensors: one small interface (``Sensor``), a host and an NVML implementation, a factory."""

from __future__ import annotations

from toolkit.telemetry.sensors.base import Sensor, SensorError
from toolkit.telemetry.sensors.factory import (
    SENSOR_KINDS,
    Availability,
    describe_available,
    make_sensors,
    parse_kinds,
)
from toolkit.telemetry.sensors.host import HostSensor
from toolkit.telemetry.sensors.nvml import NvmlSensor

__all__ = [
    "SENSOR_KINDS",
    "Availability",
    "HostSensor",
    "NvmlSensor",
    "Sensor",
    "SensorError",
    "describe_available",
    "make_sensors",
    "parse_kinds",
]
