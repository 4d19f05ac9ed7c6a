"""Choose the sensors for this node: the host sensor always, NVML where it works."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from toolkit.rundir.devices import GpuInfo
from toolkit.telemetry.sensors.base import Sensor, SensorError
from toolkit.telemetry.sensors.host import HostSensor, IpmiRunner
from toolkit.telemetry.sensors.nvml import NvmlSensor

logger = logging.getLogger(__name__)

SENSOR_KINDS = ("host", "nvml")
"""The sensors there are; ``kinds`` is ``auto`` or a comma-separated list of these."""


@dataclass(frozen=True)
class Availability:
    """Whether a sensor can work on this node, and why (for logs)."""

    available: bool
    reason: str

    def __str__(self) -> str:
        return f"{'available' if self.available else 'unavailable'}: {self.reason}"


def parse_kinds(kinds: str) -> tuple[str, ...]:
    """The sensors named by ``kinds``: ``auto`` (returned as ``()``) or a list of kinds.

    Raises:
        SensorError: A name is not a sensor kind.
    """
    names = [n.strip() for n in kinds.split(",") if n.strip()]
    if names == ["auto"]:
        return ()
    bad = [n for n in names if n not in SENSOR_KINDS]
    if not names or bad:
        raise SensorError(
            f"sensors: {kinds!r} is not valid (unknown {', '.join(map(repr, bad)) or 'empty'}); "
            f"use auto, or a comma-separated list of {', '.join(SENSOR_KINDS)}"
        )
    return tuple(dict.fromkeys(names))


def make_sensors(
    kinds: str = "auto",
    *,
    nvml: Any = None,
    root: str = "/",
    ipmi_runner: IpmiRunner | None = None,
) -> list[Sensor]:
    """Open the sensors ``kinds`` asks for.

    ``auto`` opens the host sensor and the NVML sensor when pynvml imports, ``nvmlInit``
    succeeds and there is a GPU; a named sensor that cannot work is an error.

    Args:
        kinds: ``auto``, ``host``, ``nvml`` or ``host,nvml``.
        nvml: The ``pynvml`` module or a stand-in; None imports ``pynvml``.
        root: The file-system root the host sensor reads.
        ipmi_runner: Runs ipmitool for the host sensor; None uses the real one if present.

    Returns:
        The open sensors, host first.

    Raises:
        SensorError: ``kinds`` is invalid, or a sensor it names cannot be opened.
    """
    wanted = parse_kinds(kinds)
    sensors: list[Sensor] = []
    try:
        if not wanted or "host" in wanted:
            sensors.append(HostSensor(root, ipmi_runner=ipmi_runner))
        if "nvml" in wanted:
            sensors.append(NvmlSensor(nvml))
        elif not wanted:
            try:
                sensors.append(NvmlSensor(nvml))
            except SensorError as e:
                logger.info("no NVML sensor: %s", e)
    except BaseException:
        for sensor in sensors:
            sensor.close()
        raise
    return sensors


def describe_available(
    *, nvml: Any = None, root: str = "/", ipmi_runner: IpmiRunner | None = None
) -> dict[str, Availability]:
    """Why each sensor kind is or is not available here (opens and closes each one).

    Args:
        nvml: The ``pynvml`` module or a stand-in; None imports ``pynvml``.
        root: The file-system root the host sensor reads.
        ipmi_runner: Runs ipmitool for the host sensor; None uses the real one if present.

    Returns:
        Sensor kind -> availability and reason.
    """
    host = HostSensor(root, ipmi_runner=ipmi_runner)
    info = host.info
    host.close()
    result = {
        "host": Availability(True, f"power source {info.power_source}: {info.power_source_reason}")
    }
    try:
        gpus = NvmlSensor(nvml)
    except SensorError as e:
        result["nvml"] = Availability(False, str(e))
    else:
        devices = gpus.devices()
        gpus.close()
        gpu_infos = [d for d in devices.values() if isinstance(d, GpuInfo)]
        names = sorted({"GPU" if d.name is None else d.name for d in gpu_infos})
        result["nvml"] = Availability(True, f"{len(devices)} GPU(s): {', '.join(names)}")
    return result
