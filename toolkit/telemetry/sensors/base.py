"""The sensor interface: static device info, full readings and a fast power-only path.

A reading is one ``Reading`` per device (``toolkit/rundir/reading.py``), with the field
names and units of ``docs/telemetry.md``. A field the device does not support is None;
the sampler stamps each reading with ``wall_s`` and ``mono_s``. A full reading
may leave out an energy counter that is costly to read (``read(energy=False)``): the
sampler reads those at their own, lower rate.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from toolkit.errors import RtkError
from toolkit.rundir.devices import DeviceInfo
from toolkit.rundir.reading import Reading

# The fastest a sampler reads instant power (the power-only path below), per second.
MAX_POWER_RATE_HZ = 50.0
# How often a sampler reads the energy counters that are costly to read (``read(energy=
# True)``), per second, unless told otherwise.
DEFAULT_ENERGY_RATE_HZ = 1.0


class SensorError(RtkError):
    """A sensor could not be opened, or a reading failed in an unexpected way."""

    exit_code = 4


class Sensor(ABC):
    """One source of readings on this node (``nvml`` for GPUs, ``host`` for the machine)."""

    name: str = "sensor"

    @abstractmethod
    def devices(self) -> dict[str, DeviceInfo]:
        """Static information per device key (GPU UUID or ``"host"``)."""

    @abstractmethod
    def read(self, *, energy: bool = True) -> list[Reading]:
        """Take a full reading: one per device.

        Args:
            energy: Whether to read the energy counters too. False leaves out those
                that cost a sensor much to read (NVML's takes about 4 ms per GPU on an
                H200), never a stale copy; a sensor whose counters cost next to
                nothing (the host's RAPL files) may report them anyway.

        Raises:
            SensorError: On an unexpected failure (unsupported fields are left out).
        """

    @abstractmethod
    def read_power(self) -> list[Reading]:
        """Take a fast power-only reading (may be empty when the sensor has none).

        Raises:
            SensorError: On an unexpected failure.
        """

    def close(self) -> None:  # noqa: B027 - a no-op default is the point
        """Release what the sensor holds; the sensor is not used afterwards."""
