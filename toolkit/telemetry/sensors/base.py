"""The sensor interface: static device info, full readings and a fast power-only path.

A reading is one dict per device, ``{"device": key, "kind": ..., <fields>}``, with the
field names and units of ``docs/telemetry.md``. A field the device does not support is
left out (never ``None``); the sampler adds ``wall_s`` and ``mono_s``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from toolkit.errors import RtkError

# The fastest a sampler reads instant power (the power-only path below), per second.
MAX_POWER_RATE_HZ = 50.0


class SensorError(RtkError):
    """A sensor could not be opened, or a reading failed in an unexpected way."""

    exit_code = 4


class Sensor(ABC):
    """One source of readings on this node (``nvml`` for GPUs, ``host`` for the machine)."""

    name: str = "sensor"

    @abstractmethod
    def devices(self) -> dict[str, dict[str, Any]]:
        """Static information per device key (GPU UUID or ``"host"``), JSON-ready."""

    @abstractmethod
    def read(self) -> list[dict[str, Any]]:
        """Take a full reading: one dict per device, without ``wall_s``/``mono_s``.

        Raises:
            SensorError: On an unexpected failure (unsupported fields are left out).
        """

    @abstractmethod
    def read_power(self) -> list[dict[str, Any]]:
        """Take a fast power-only reading (may be empty when the sensor has none).

        Raises:
            SensorError: On an unexpected failure.
        """

    def close(self) -> None:  # noqa: B027 - a no-op default is the point
        """Release what the sensor holds; the sensor is not used afterwards."""
