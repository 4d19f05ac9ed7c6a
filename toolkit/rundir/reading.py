"""One sensor reading of one device: the fixed columns of a trace (docs/telemetry.md).

The sensors (``toolkit/telemetry/sensors``) make them, the sampler stamps them with its
clocks and ``TraceWriter.write_reading`` puts them in the trace (``traces.py``). A field
the device does not support is None (the trace's null); what a sensor reports beyond
the documented readings goes in ``extra`` (the trace's ``extra`` JSON column).

No pyarrow here: the sensors import this on every node, the trace's writer only in the
sampler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from toolkit.json_types import JsonObject, JsonValue

NO_EXTRA: Mapping[str, JsonValue] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Reading:
    """One device's reading, without the sampler's ``wall_s``/``mono_s``.

    Attributes:
        device: ``"host"`` or the GPU UUID.
        kind: ``"host"``, ``"gpu"`` (a full reading) or ``"gpu_power"`` (power only).
        power_source: ``nvml_instant``, ``nvml_average``, ``ipmi`` or ``model``.
        extra: What the sensor reported beyond the documented fields (JSON-ready).

    The other fields are the documented readings, by their trace column names and units.
    """

    device: str
    kind: str
    power_source: str | None = None
    power_w: float | None = None
    nvml_ts_us: int | None = None
    energy_j: float | None = None
    rapl_package_j: float | None = None
    rapl_dram_j: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    temperature_c: int | None = None
    gpu_util_pct: int | None = None
    mem_util_pct: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    clocks_event_reasons: int | None = None
    pcie_tx_kbs: int | None = None
    pcie_rx_kbs: int | None = None
    nvlink_tx_kib: int | None = None
    nvlink_rx_kib: int | None = None
    cpu_util_pct: float | None = None
    extra: Mapping[str, JsonValue] = field(default_factory=lambda: NO_EXTRA)

    def to_json(self) -> JsonObject:
        """The reading as the sensors' dicts were: fields that are None left out."""
        out: JsonObject = {"device": self.device, "kind": self.kind}
        for name in OPTIONAL_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out.update(self.extra)
        return out


OPTIONAL_FIELDS: tuple[str, ...] = tuple(
    name for name in Reading.__dataclass_fields__ if name not in ("device", "kind", "extra")
)
"""The fields a device may leave out (None), in the order of the class."""
NUMBER_FIELDS: tuple[str, ...] = tuple(n for n in OPTIONAL_FIELDS if n != "power_source")
"""The documented readings: the trace's float64 columns (``traces.READINGS``)."""
