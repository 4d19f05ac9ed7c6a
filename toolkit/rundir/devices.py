"""What a sampler's sensors say about each device: the manifest's ``devices`` entries.

The sensors (``toolkit/telemetry/sensors``) describe their devices once, when they
open: a GPU as NVML names it (``GpuInfo``), the machine itself as the host sensor
sees it (``HostInfo``). The telemetry session writes them into the manifest under each
node's ``devices`` (device key -> entry) and the report reads them back
(``device_info``). ``to_json`` writes what the sensors always wrote: a field the device
did not report is left out, except the host's ``power_source`` and ``energy_source``,
which are always there (null: none).

Reading is lenient, as the rest of the manifest's: a field that is missing or of the
wrong type reads as None (left out).

No pyarrow here: the sensors import this on every node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

from toolkit.fields import is_integer, is_number
from toolkit.json_types import JsonObject, JsonValue


def _text(data: JsonObject, key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def _integer(data: JsonObject, key: str) -> int | None:
    value = data.get(key)
    return value if is_integer(value) else None


def _number(data: JsonObject, key: str) -> float | None:
    value = data.get(key)
    return float(value) if is_number(value) else None


def _texts(data: JsonObject, key: str) -> tuple[str, ...] | None:
    value = data.get(key)
    if not isinstance(value, list):
        return None
    return tuple(v for v in value if isinstance(v, str))


def _objects(data: JsonObject, key: str) -> list[JsonObject]:
    value = data.get(key)
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, dict)]


def _put(out: JsonObject, key: str, value: JsonValue) -> None:
    """``out[key] = value``, unless ``value`` is None (left out)."""
    if value is not None:
        out[key] = value


@dataclass(frozen=True)
class GpuInfo:
    """One GPU, as NVML described it when the sensor opened (None: not reported).

    Attributes:
        uuid: Its UUID (the device's key).
        nvml_index: NVML's index of the GPU on its node.
        name: Its product name.
        serial: Its serial number.
        memory_total_bytes: Its memory.
        power_limit_w: The enforced power limit when the sensor opened.
        pci_bus_id: Its PCI bus id.
        mig_mode: ``enabled`` or ``disabled``.
        mig_devices: The UUIDs of its MIG instances (MIG mode only).
        unsupported: The queries NVML refused for it so far (not retried).
    """

    uuid: str | None = None
    nvml_index: int | None = None
    name: str | None = None
    serial: str | None = None
    memory_total_bytes: int | None = None
    power_limit_w: float | None = None
    pci_bus_id: str | None = None
    mig_mode: str | None = None
    mig_devices: tuple[str, ...] | None = None
    unsupported: tuple[str, ...] | None = None

    @property
    def kind(self) -> str:
        """``gpu``."""
        return "gpu"

    def to_json(self) -> JsonObject:
        """The entry as the NVML sensor writes it (fields not reported left out)."""
        out: JsonObject = {"kind": self.kind}
        _put(out, "uuid", self.uuid)
        _put(out, "nvml_index", self.nvml_index)
        _put(out, "name", self.name)
        _put(out, "serial", self.serial)
        _put(out, "memory_total_bytes", self.memory_total_bytes)
        _put(out, "power_limit_w", self.power_limit_w)
        _put(out, "pci_bus_id", self.pci_bus_id)
        _put(out, "mig_mode", self.mig_mode)
        _put(out, "mig_devices", None if self.mig_devices is None else list(self.mig_devices))
        _put(out, "unsupported", None if self.unsupported is None else list(self.unsupported))
        return out

    @classmethod
    def from_json(cls, data: JsonObject) -> GpuInfo:
        """The inverse of ``to_json``; a wrong or missing field reads as None."""
        return cls(
            uuid=_text(data, "uuid"),
            nvml_index=_integer(data, "nvml_index"),
            name=_text(data, "name"),
            serial=_text(data, "serial"),
            memory_total_bytes=_integer(data, "memory_total_bytes"),
            power_limit_w=_number(data, "power_limit_w"),
            pci_bus_id=_text(data, "pci_bus_id"),
            mig_mode=_text(data, "mig_mode"),
            mig_devices=_texts(data, "mig_devices"),
            unsupported=_texts(data, "unsupported"),
        )


@dataclass(frozen=True)
class RaplDomain:
    """One RAPL counter the host sensor reads: ``intel-rapl:0`` (package), ``...:0:0`` (dram)."""

    zone: str
    domain: str
    name: str

    def to_json(self) -> JsonObject:
        """``{"zone": ..., "domain": ..., "name": ...}``."""
        return {"zone": self.zone, "domain": self.domain, "name": self.name}


@dataclass(frozen=True)
class PowerModel:
    """The CPU model a host without RAPL or IPMI estimates its power with (not a measurement).

    Attributes:
        idle_w_per_cpu: Watts per logical CPU when idle.
        busy_w_per_cpu: Extra watts per fully busy logical CPU.
        note: What the numbers are.
    """

    idle_w_per_cpu: float
    busy_w_per_cpu: float
    note: str

    def to_json(self) -> JsonObject:
        """As the host sensor writes it."""
        return {
            "idle_w_per_cpu": self.idle_w_per_cpu,
            "busy_w_per_cpu": self.busy_w_per_cpu,
            "note": self.note,
        }


@dataclass(frozen=True)
class HostInfo:
    """The machine, as the host sensor found it when it opened.

    Attributes:
        power_source: Where its ``power_w`` comes from: ``ipmi``, ``rapl``, ``model``;
            None: nowhere.
        energy_source: Where its ``energy_j`` comes from: ``rapl``, ``model`` or None.
        power_source_reason: Why that source (and why not the others).
        rapl_domains: The RAPL counters it reads.
        cpus: Its logical CPUs.
        model: The CPU model, when power is estimated from it.
        rapl_reason: Why there is no RAPL, when there is none.
        ipmi_reason: Why there is no IPMI, when there is none.
        memory_total_bytes: Its memory.
    """

    power_source: str | None = None
    energy_source: str | None = None
    power_source_reason: str | None = None
    rapl_domains: tuple[RaplDomain, ...] = ()
    cpus: int | None = None
    model: PowerModel | None = None
    rapl_reason: str | None = None
    ipmi_reason: str | None = None
    memory_total_bytes: int | None = None

    @property
    def kind(self) -> str:
        """``host``."""
        return "host"

    def to_json(self) -> JsonObject:
        """The entry as the host sensor writes it."""
        out: JsonObject = {"kind": self.kind}
        _put(out, "cpus", self.cpus)
        _put(out, "model", None if self.model is None else self.model.to_json())
        out["power_source"] = self.power_source
        _put(out, "power_source_reason", self.power_source_reason)
        out["energy_source"] = self.energy_source
        out["rapl_domains"] = [d.to_json() for d in self.rapl_domains]
        _put(out, "rapl_reason", self.rapl_reason)
        _put(out, "ipmi_reason", self.ipmi_reason)
        _put(out, "memory_total_bytes", self.memory_total_bytes)
        return out

    @classmethod
    def from_json(cls, data: JsonObject) -> HostInfo:
        """The inverse of ``to_json``; a wrong or missing field reads as None (or empty)."""
        model = data.get("model")
        power_model = None
        if isinstance(model, Mapping):
            idle_w, busy_w = _number(model, "idle_w_per_cpu"), _number(model, "busy_w_per_cpu")
            if idle_w is not None and busy_w is not None:
                power_model = PowerModel(idle_w, busy_w, _text(model, "note") or "")
        domains = tuple(
            RaplDomain(zone, domain, _text(d, "name") or "")
            for d in _objects(data, "rapl_domains")
            if (zone := _text(d, "zone")) is not None and (domain := _text(d, "domain")) is not None
        )
        return cls(
            power_source=_text(data, "power_source"),
            energy_source=_text(data, "energy_source"),
            power_source_reason=_text(data, "power_source_reason"),
            rapl_domains=domains,
            cpus=_integer(data, "cpus"),
            model=power_model,
            rapl_reason=_text(data, "rapl_reason"),
            ipmi_reason=_text(data, "ipmi_reason"),
            memory_total_bytes=_integer(data, "memory_total_bytes"),
        )


DeviceInfo: TypeAlias = GpuInfo | HostInfo
"""One device's entry in the manifest: a GPU's or the host's."""


def device_info(key: str, data: object) -> DeviceInfo:
    """The manifest entry of device ``key`` as read (not an object: an empty entry).

    Its ``kind`` says which; without one, the key does (``host`` or a GPU's UUID).
    """
    entry: JsonObject = data if isinstance(data, dict) else {}
    kind = entry.get("kind") or ("host" if key == "host" else "gpu")
    return HostInfo.from_json(entry) if kind == "host" else GpuInfo.from_json(entry)
