"""The telemetry options of a run, declared once: sensors, rates, Prometheus, idle phases.

The CLI builds them from its flags, ``TrainConfig`` and ``rtk profile`` from their
settings, and the Ray jobs (``record_job.py``, the trainer) read them back from JSON.
They are checked where they are made, before anything starts on a node: a typo such
as ``--sensors nvm`` is a usage error here, not a failure on the nodes after the run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from toolkit.errors import RtkError
from toolkit.json_types import JsonObject
from toolkit.telemetry.sensors.base import (
    DEFAULT_ENERGY_RATE_HZ,
    MAX_POWER_RATE_HZ,
    SensorError,
)
from toolkit.telemetry.sensors.factory import parse_kinds

MAX_RATE_HZ = 50.0


def sensors_problem(sensors: str) -> str | None:
    """Why ``sensors`` is not ``auto`` or a comma-separated list of sensor kinds; None if it is."""
    try:
        parse_kinds(sensors)
    except SensorError as e:
        return str(e).removeprefix("sensors: ")
    return None


@dataclass(frozen=True)
class TelemetryOptions:
    """How the samplers of one run read their nodes.

    Attributes:
        sensors: ``auto`` (whatever each node has) or a list such as ``host,nvml``.
        rate_hz: Full readings per second on every node.
        power_rate_hz: GPU instant-power readings per second; 0: with every sample.
        prometheus_port: Serve each node's newest readings on this port; 0: off.
        baseline_s: Idle power recorded before the workload for this long; 0: none.
        cooldown_max_s: After the workload, sample until power and temperature settle,
            at most this long; 0: none.
        energy_rate_hz: Energy counter readings per second, taken with full readings
            (and always with a sampler's first and last); 0: with every full reading.
            NVML's counter costs about 4 ms per GPU a read on an H200, and a
            cumulative counter needs no high rate: the report spreads its readings
            over the power samples.
    """

    sensors: str = "auto"
    rate_hz: float = 10.0
    power_rate_hz: float = 0.0
    prometheus_port: int = 0
    baseline_s: float = 0.0
    cooldown_max_s: float = 0.0
    energy_rate_hz: float = DEFAULT_ENERGY_RATE_HZ

    def problems(self) -> list[str]:
        """What is wrong, one line per option, named as the CLI flag."""
        found = []
        why = sensors_problem(self.sensors)
        if why is not None:
            found.append(f"--sensors {why}")
        if not 0 < self.rate_hz <= MAX_RATE_HZ:
            found.append("--telemetry-rate-hz must be above 0 and at most 50")
        if self.baseline_s < 0 or self.cooldown_max_s < 0:
            found.append("--baseline-s and --cooldown-max-s must be 0 or more")
        if not 0 <= self.power_rate_hz <= MAX_POWER_RATE_HZ:
            found.append("--power-rate-hz must be 0 (same as --telemetry-rate-hz) to 50")
        if not 0 <= self.energy_rate_hz <= MAX_RATE_HZ:
            found.append(
                "--energy-rate-hz must be 0 (with every full reading) to 50, "
                f"got {self.energy_rate_hz:g}"
            )
        if not 0 <= self.prometheus_port <= 65535:
            found.append(f"--prometheus-port {self.prometheus_port}: give 0 (off) or a port")
        return found

    def check(self) -> TelemetryOptions:
        """Raise ``RtkError`` naming every option that cannot work; returns self."""
        found = self.problems()
        if found:
            raise RtkError("; ".join(found))
        return self

    def to_json(self) -> JsonObject:
        """A JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TelemetryOptions:
        """The inverse of ``to_json``; missing keys take their defaults.

        Raises:
            RtkError: A key is not a telemetry option (the valid ones are named).
        """
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise RtkError(
                f"unknown telemetry option(s): {', '.join(unknown)}; valid: {', '.join(names)}"
            )
        energy_rate_hz = data.get("energy_rate_hz")
        return cls(
            sensors=str(data.get("sensors", "auto")),
            rate_hz=float(data.get("rate_hz", 10.0)),
            power_rate_hz=float(data.get("power_rate_hz") or 0.0),
            prometheus_port=int(data.get("prometheus_port") or 0),
            baseline_s=float(data.get("baseline_s") or 0.0),
            cooldown_max_s=float(data.get("cooldown_max_s") or 0.0),
            energy_rate_hz=float(
                DEFAULT_ENERGY_RATE_HZ if energy_rate_hz is None else energy_rate_hz
            ),
        )
