"""A node's GPUs as NVML sees them, as typed records (read on the host).

``facts.py`` (``gpu_facts``) prints them under ``gpus``; ``GpuFacts.read`` reads that
object once. A field NVML did not report stays ``None`` (the GPU does not support it,
or this user may not read it); preflight's GPU checks skip it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit.fields import Fields
from toolkit.json_types import JsonObject
from toolkit.nodeinfo.answer_errors import answer_fields


@dataclass(frozen=True)
class RemappedRows:
    """NVML's row-remapper counts of one GPU."""

    corrected: int
    uncorrected: int
    pending: bool
    failure: bool


@dataclass(frozen=True)
class GpuDeviceFacts:
    """One GPU's health; ``None``: not reported.

    Attributes:
        uuid: NVML's UUID (``GPU-...``).
        index: NVML's index on the node.
        name: The product name.
        pci_bus_id: The PCI address NVML gives (``00000000:18:00.0``).
        persistence_mode: Persistence mode is on.
        mig_enabled: MIG mode is on.
        ecc_enabled: ECC is on now.
        ecc_pending_enabled: ECC is on after the next reset.
        ecc_volatile_uncorrected: Uncorrected ECC errors since the driver loaded.
        remapped_rows: The row remapper's counts.
        clocks_event_reasons: NVML's clocks-event reasons mask.
        pcie_gen: The PCIe link's current generation.
        pcie_gen_max: Its max generation.
        pcie_width: The PCIe link's current width (lanes).
        pcie_width_max: Its max width.
        nvlink_active: Per NVLink link, whether it is active (empty: no NVLink).
        errors: NVML errors reading this GPU, by field.
    """

    uuid: str
    index: int | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    persistence_mode: bool | None = None
    mig_enabled: bool | None = None
    ecc_enabled: bool | None = None
    ecc_pending_enabled: bool | None = None
    ecc_volatile_uncorrected: int | None = None
    remapped_rows: RemappedRows | None = None
    clocks_event_reasons: int | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    nvlink_active: tuple[bool, ...] = ()
    errors: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``GPU 3 (GPU-...)``: how checks name the GPU."""
        return f"GPU {'?' if self.index is None else self.index} ({self.uuid})"

    @classmethod
    def read(cls, uuid: str, f: Fields) -> GpuDeviceFacts:
        """Read one entry of ``gpus.devices``."""
        rows = f.nested_or_none("remapped_rows")
        return cls(
            uuid=uuid,
            index=f.integer_or_none("index"),
            name=f.text_or_none("name"),
            pci_bus_id=f.text_or_none("pci_bus_id"),
            persistence_mode=f.flag_or_none("persistence_mode"),
            mig_enabled=f.flag_or_none("mig_enabled"),
            ecc_enabled=f.flag_or_none("ecc_enabled"),
            ecc_pending_enabled=f.flag_or_none("ecc_pending_enabled"),
            ecc_volatile_uncorrected=f.integer_or_none("ecc_volatile_uncorrected"),
            remapped_rows=None
            if rows is None
            else RemappedRows(
                corrected=rows.integer("corrected"),
                uncorrected=rows.integer("uncorrected"),
                pending=rows.flag("pending"),
                failure=rows.flag("failure"),
            ),
            clocks_event_reasons=f.integer_or_none("clocks_event_reasons"),
            pcie_gen=f.integer_or_none("pcie_gen"),
            pcie_gen_max=f.integer_or_none("pcie_gen_max"),
            pcie_width=f.integer_or_none("pcie_width"),
            pcie_width_max=f.integer_or_none("pcie_width_max"),
            nvlink_active=f.flags("nvlink_active"),
            errors=f.text_map("errors"),
        )

    def to_json(self) -> JsonObject:
        """The entry as ``facts.py`` prints it (fields not reported left out)."""
        out: JsonObject = {}
        for key in _DEVICE_FIELDS:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.remapped_rows is not None:
            out["remapped_rows"] = vars(self.remapped_rows).copy()
        if self.nvlink_active:
            out["nvlink_active"] = list(self.nvlink_active)
        if self.errors:
            out["errors"] = dict(self.errors)
        return out


_DEVICE_FIELDS = (
    "index",
    "name",
    "pci_bus_id",
    "persistence_mode",
    "mig_enabled",
    "ecc_enabled",
    "ecc_pending_enabled",
    "ecc_volatile_uncorrected",
    "clocks_event_reasons",
    "pcie_gen",
    "pcie_gen_max",
    "pcie_width",
    "pcie_width_max",
)


@dataclass(frozen=True)
class GpuFacts:
    """A node's GPUs.

    Attributes:
        available: NVML answered (false on a node without GPUs, driver or pynvml).
        reason: Why NVML is not available.
        driver_version: The NVIDIA driver's version.
        cuda_driver_version: The CUDA version the driver supports (``12.4``).
        count: How many GPUs NVML counts.
        devices: Every GPU read, in the order the node sent them.
        errors: NVML errors not tied to one GPU's field, by what was read.
    """

    available: bool = False
    reason: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    count: int = 0
    devices: tuple[GpuDeviceFacts, ...] = ()
    errors: Mapping[str, str] = field(default_factory=dict)

    def by_index(self) -> list[GpuDeviceFacts]:
        """The devices by index (one without an index last), then UUID."""
        return sorted(self.devices, key=lambda d: (1 << 30 if d.index is None else d.index, d.uuid))

    @classmethod
    def read(cls, f: Fields) -> GpuFacts:
        """Read the ``gpus`` object of a facts answer."""
        return cls(
            available=f.flag("available"),
            reason=f.text_or_none("reason"),
            driver_version=f.text_or_none("driver_version"),
            cuda_driver_version=f.text_or_none("cuda_driver_version"),
            count=f.integer_or_none("count") or 0,
            devices=tuple(GpuDeviceFacts.read(u, d) for u, d in f.children("devices").items()),
            errors=f.text_map("errors"),
        )

    @classmethod
    def from_json(cls, node: str, data: Any) -> GpuFacts:
        """Read ``gpu_facts``'s answer for ``node``.

        Raises:
            ClusterError: A field is missing or of the wrong type (named with the node).
        """
        return cls.read(answer_fields(node, "GPU facts", data, ("gpus",)))

    def to_json(self) -> JsonObject:
        """The object as ``facts.py`` prints it (``from_json`` reads it back)."""
        if not self.available:
            return {"available": False, "reason": self.reason}
        out: JsonObject = {"available": True}
        if self.driver_version is not None:
            out["driver_version"] = self.driver_version
        if self.cuda_driver_version is not None:
            out["cuda_driver_version"] = self.cuda_driver_version
        out["count"] = self.count
        out["devices"] = {d.uuid: d.to_json() for d in self.devices}
        if self.errors:
            out["errors"] = dict(self.errors)
        return out
