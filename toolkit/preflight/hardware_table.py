"""The hardware table as used: cited figures per GPU model and interconnect, and matching.

Built by ``toolkit.preflight.hardware.load_hardware`` from rtk's
``templates/hardware.yaml`` and a user's file. ``HardwareTable.match_gpu`` finds the
entry for what NVML reports: its product name, or its PCI device ID.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from toolkit.errors import HardwareError, Problem

LinkLayer = Literal["InfiniBand", "Ethernet"]
T = TypeVar("T")


@dataclass(frozen=True)
class Cited:
    """A number and where it comes from.

    Attributes:
        value: The number, in the unit its key names.
        sources: URLs (source keys resolved); empty for a user's bare number.
        note: How the number was read from its source.
    """

    value: float
    sources: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model's expected figures; ``None`` or absent: not known."""

    key: str
    name: str
    nvml_names: tuple[str, ...] = ()
    pci_device_ids: tuple[str, ...] = ()
    peak_tflops: Mapping[str, Cited] = field(default_factory=dict)
    measured_tflops: Mapping[str, Cited] = field(default_factory=dict)
    memory_gb_s: Cited | None = None
    measured_memory_gb_s: Cited | None = None
    pcie_gen: Cited | None = None
    pcie_width: Cited | None = None
    measured_host_device_gb_s: Cited | None = None
    nvlink_unidir_gb_s: Cited | None = None
    measured_nvlink_gb_s: Cited | None = None
    tdp_w: Cited | None = None
    boost_clock_mhz: Cited | None = None


@dataclass(frozen=True)
class InterconnectSpec:
    """One interconnect: the link layer and port rate sysfs should show."""

    key: str
    name: str
    link_layer: LinkLayer | None
    rate_gbit_s: Cited | None


@dataclass(frozen=True)
class HardwareTable:
    """The merged table: defaults, then the user's file.

    Attributes:
        gpus: GPU models by key; a user's models first (they win a match).
        interconnects: Interconnects by key.
        warn_below: Fraction of a reference below which a check warns.
        fail_below: Fraction of a reference below which a check fails.
        efficiency: Measured / peak by metric, for models with no measurement.
        pcie_x16_unidir_gb_s: Theoretical x16 bandwidth per PCIe generation.
        files: The files merged, in order.
    """

    gpus: Mapping[str, GpuSpec]
    interconnects: Mapping[str, InterconnectSpec]
    warn_below: float
    fail_below: float
    efficiency: Mapping[str, Cited]
    pcie_x16_unidir_gb_s: Mapping[int, Cited]
    files: tuple[str, ...]

    def gpu(self, key: str) -> GpuSpec:
        """The model named ``key`` (the inventory's or the CLI's name for it).

        Raises:
            HardwareError: No such model; the message lists the known ones.
        """
        return _lookup(self.gpus, key, "gpus", self.files)

    def interconnect(self, key: str) -> InterconnectSpec:
        """The interconnect named ``key``.

        Raises:
            HardwareError: No such interconnect; the message lists the known ones.
        """
        return _lookup(self.interconnects, key, "interconnects", self.files)

    def match_gpu(
        self, nvml_name: str | None, pci_device_id: str | int | None = None
    ) -> GpuSpec | None:
        """The model NVML describes, or None when no entry claims it.

        Args:
            nvml_name: ``nvmlDeviceGetName`` (``NVIDIA H100 80GB HBM3``); case, runs of
                spaces and a leading ``NVIDIA`` do not matter.
            pci_device_id: The PCI device ID as NVML's ``pciDeviceId`` (``0x233010DE``,
                device in the upper 16 bits) or as 4 hex digits (``2330``); it is
                tried first, since names vary between driver versions.
        """
        device = _device_id(pci_device_id)
        if device is not None:
            for spec in self.gpus.values():
                if device in spec.pci_device_ids:
                    return spec
        name = name_key(nvml_name or "")
        if not name:
            return None
        for spec in self.gpus.values():
            if name in (name_key(n) for n in spec.nvml_names):
                return spec
        return None


def _lookup(table: Mapping[str, T], key: str, section: str, files: tuple[str, ...]) -> T:
    if key in table:
        return table[key]
    close = difflib.get_close_matches(key, list(table), n=1)
    guess = f"did you mean '{close[0]}'? " if close else ""
    message = (
        f"no entry '{key}'; {guess}known: {', '.join(sorted(table))} "
        f"(add it under {section}: in your hardware file)"
    )
    raise HardwareError([Problem(" + ".join(files), None, section, message)])


def name_key(name: str) -> str:
    """A product name as matched: case-folded, single-spaced, without a leading NVIDIA."""
    words = name.casefold().split()
    if words and words[0] == "nvidia":
        words = words[1:]
    return " ".join(words)


def _device_id(value: str | int | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, int):
        return f"{(value >> 16) & 0xFFFF:04x}" if value > 0xFFFF else f"{value:04x}"
    text = value.strip().lower().removeprefix("0x")
    if re.fullmatch(r"[0-9a-f]{8}", text):
        return text[:4]
    return text if re.fullmatch(r"[0-9a-f]{4}", text) else None
