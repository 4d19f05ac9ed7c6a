"""The NVML sensor: NVIDIA GPUs through nvidia-ml-py (which imports as ``pynvml``).

GPUs are keyed by UUID, never by index. A call that answers NotSupported, NoPermission
or FunctionNotFound for a GPU is remembered and not made again for that GPU; its fields
are left out of the readings. On a GPU in MIG mode, power, energy, clocks and
temperature are read on the parent GPU (keyed by its UUID); the MIG instances' UUIDs are
listed in ``devices()`` and utilisation, which NVML does not give per instance, is left
out.

``nvmlDeviceGetPcieThroughput`` samples a byte counter over 20 ms and blocks meanwhile,
so PCIe throughput is read for at most one GPU per ``read()`` (the stalest one), and
for each GPU at most once per ``pcie_interval_s``. The energy counter
(``nvmlDeviceGetTotalEnergyConsumption``, about 4 ms a call on an H200, the field-values
API no faster) is read only when ``read(energy=True)`` asks: the sampler asks at its
own rate.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from toolkit.rundir.devices import DeviceInfo, GpuInfo
from toolkit.rundir.reading import Reading
from toolkit.telemetry.sensors.base import Sensor, SensorError

logger = logging.getLogger(__name__)

PCIE_INTERVAL_S = 1.0
"""Least time between two PCIe throughput readings of one GPU (each blocks 20 ms)."""

ALL_LINKS_SCOPE = 0xFFFFFFFF
"""Field-value scope (UINT_MAX) that sums an NVLink throughput counter over all links."""

# Which member of the c_nvmlValue_t union holds a field value, by NVML_VALUE_TYPE_* name.
_VALUE_MEMBERS = {
    "NVML_VALUE_TYPE_DOUBLE": "dVal",
    "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal",
    "NVML_VALUE_TYPE_SIGNED_INT": "siVal",
    "NVML_VALUE_TYPE_UNSIGNED_SHORT": "usVal",
}


def _text(value: Any) -> str:
    """NVML strings: ``str`` in current nvidia-ml-py, ``bytes`` in older releases."""
    return value.decode() if isinstance(value, bytes) else str(value)


FieldId = int | tuple[int, int]
"""An NVML field id, or (field id, scope) for a field read over a scope (NVLink links)."""


@dataclass(frozen=True)
class _FieldValue:
    """One field value NVML answered: the value (by its value type) and when it was taken."""

    value: float
    timestamp_us: int


@dataclass
class _Gpu:
    index: int
    handle: Any
    uuid: str = ""
    info: GpuInfo = field(default_factory=GpuInfo)
    unsupported: set[str] = field(default_factory=set)
    pcie_read_s: float = -math.inf


class NvmlSensor(Sensor):
    """Every GPU NVML sees on this node.

    Args:
        nvml: The ``pynvml`` module, or an object shaped like it (tests pass a fake);
            ``None`` imports ``pynvml``.
        pcie_interval_s: Least time between PCIe throughput readings of one GPU;
            0 reads every GPU's PCIe throughput on every ``read()``.
        clock: Monotonic clock in seconds (for the PCIe schedule).

    Raises:
        SensorError: pynvml does not import, ``nvmlInit`` fails or there is no GPU.
    """

    name = "nvml"

    def __init__(
        self,
        nvml: Any = None,
        *,
        pcie_interval_s: float = PCIE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if nvml is None:
            try:
                import pynvml
            except ImportError as e:
                raise SensorError(f"nvml: cannot import pynvml (nvidia-ml-py): {e}") from e
            nvml = pynvml
        self._nvml = nvml
        self._pcie_interval_s = pcie_interval_s
        self._clock = clock
        self._skip_codes = {
            nvml.NVML_ERROR_NOT_SUPPORTED,
            nvml.NVML_ERROR_NO_PERMISSION,
            nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        }
        self._value_members = {
            getattr(nvml, const): member
            for const, member in _VALUE_MEMBERS.items()
            if hasattr(nvml, const)
        }
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            raise SensorError(f"nvml: nvmlInit failed: {e}") from e
        self._initialized = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
            self._gpus = [self._open_gpu(i) for i in range(count)]
        except nvml.NVMLError as e:
            self.close()
            raise SensorError(f"nvml: cannot list GPUs: {e}") from e
        except SensorError:
            self.close()
            raise
        if not self._gpus:
            self.close()
            raise SensorError("nvml: NVML is loaded but sees no GPU")
        logger.debug("nvml sensor: %s", ", ".join(g.uuid for g in self._gpus))

    def devices(self) -> dict[str, DeviceInfo]:
        """Per GPU UUID: name, serial, memory, power limit, PCI bus id, MIG mode and devices.

        ``unsupported`` lists the queries found unsupported so far (they are not retried).
        """
        return {
            g.uuid: replace(g.info, unsupported=tuple(sorted(g.unsupported))) for g in self._gpus
        }

    def read(self, *, energy: bool = True) -> list[Reading]:
        """One ``kind: "gpu"`` reading per GPU with every field it supports.

        Args:
            energy: Whether to read the energy counter (``energy_j``): about 4 ms per
                GPU on an H200, where every other field takes microseconds.
        """
        nvml = self._nvml
        query = self._query
        pcie_due = self._pcie_due()
        rows = []
        for gpu in self._gpus:
            power_w, power_source, nvml_ts_us = self._power(gpu)
            energy_j = None
            if energy:
                energy_mj = query(gpu, "energy", nvml.nvmlDeviceGetTotalEnergyConsumption)
                if energy_mj is not None:
                    energy_j = energy_mj / 1000.0
            limit_mw = query(gpu, "power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit)
            sm_mhz = query(gpu, "sm_clock", nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM)
            mem_mhz = query(gpu, "mem_clock", nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_MEM)
            temp = query(
                gpu, "temperature", nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU
            )
            util = query(gpu, "utilization", nvml.nvmlDeviceGetUtilizationRates)
            memory = query(gpu, "memory", nvml.nvmlDeviceGetMemoryInfo)
            reasons = query(gpu, "clocks_event_reasons", self._clocks_event_reasons_fn())
            pcie_tx, pcie_rx = self._pcie(gpu) if gpu in pcie_due else (None, None)
            nvlink_tx, nvlink_rx = self._nvlink(gpu)
            rows.append(
                Reading(
                    device=gpu.uuid,
                    kind="gpu",
                    power_source=power_source,
                    power_w=power_w,
                    nvml_ts_us=nvml_ts_us,
                    energy_j=energy_j,
                    power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
                    sm_clock_mhz=None if sm_mhz is None else int(sm_mhz),
                    mem_clock_mhz=None if mem_mhz is None else int(mem_mhz),
                    temperature_c=None if temp is None else int(temp),
                    gpu_util_pct=None if util is None else int(util.gpu),
                    mem_util_pct=None if util is None else int(util.memory),
                    memory_used_bytes=None if memory is None else int(memory.used),
                    memory_total_bytes=None if memory is None else int(memory.total),
                    clocks_event_reasons=None if reasons is None else int(reasons),
                    pcie_tx_kbs=pcie_tx,
                    pcie_rx_kbs=pcie_rx,
                    nvlink_tx_kib=nvlink_tx,
                    nvlink_rx_kib=nvlink_rx,
                )
            )
        return rows

    def read_power(self) -> list[Reading]:
        """One ``kind: "gpu_power"`` reading per GPU: power only, instant where supported."""
        rows = []
        for gpu in self._gpus:
            power_w, power_source, nvml_ts_us = self._power(gpu)
            if power_w is not None:
                rows.append(
                    Reading(
                        device=gpu.uuid,
                        kind="gpu_power",
                        power_source=power_source,
                        power_w=power_w,
                        nvml_ts_us=nvml_ts_us,
                    )
                )
        return rows

    def close(self) -> None:
        """Shut NVML down (once); a failure is logged, not raised."""
        if not self._initialized:
            return
        self._initialized = False
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as e:
            logger.warning("nvmlShutdown failed: %s", e)

    # -- opening ------------------------------------------------------------------------

    def _open_gpu(self, index: int) -> _Gpu:
        nvml = self._nvml
        gpu = _Gpu(index=index, handle=nvml.nvmlDeviceGetHandleByIndex(index))
        gpu.uuid = _text(nvml.nvmlDeviceGetUUID(gpu.handle))
        name = self._query(gpu, "name", nvml.nvmlDeviceGetName)
        serial = self._query(gpu, "serial", nvml.nvmlDeviceGetSerial)
        memory = self._query(gpu, "memory", nvml.nvmlDeviceGetMemoryInfo)
        limit_mw = self._query(gpu, "power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit)
        pci = self._query(gpu, "pci_info", nvml.nvmlDeviceGetPciInfo)
        mig_mode = self._query(gpu, "mig_mode", nvml.nvmlDeviceGetMigMode)
        mig_enabled = mig_mode is not None and mig_mode[0] == nvml.NVML_DEVICE_MIG_ENABLE
        mig_devices = None
        if mig_enabled:
            mig_devices = tuple(self._mig_uuids(gpu))
            gpu.unsupported.add("utilization")  # NVML has no utilisation per instance
        gpu.info = GpuInfo(
            uuid=gpu.uuid,
            nvml_index=index,
            name=None if name is None else _text(name),
            serial=None if serial is None else _text(serial),
            memory_total_bytes=None if memory is None else int(memory.total),
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            pci_bus_id=None if pci is None else _text(pci.busId),
            mig_mode=None if mig_mode is None else ("enabled" if mig_enabled else "disabled"),
            mig_devices=mig_devices,
        )
        return gpu

    def _mig_uuids(self, gpu: _Gpu) -> list[str]:
        nvml = self._nvml
        count = self._query(gpu, "mig_device_count", nvml.nvmlDeviceGetMaxMigDeviceCount) or 0
        uuids = []
        for i in range(int(count)):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, i)
            except nvml.NVMLError as e:
                if e.value == nvml.NVML_ERROR_NOT_FOUND:  # an empty MIG slot
                    continue
                raise SensorError(f"nvml: {gpu.uuid}: MIG device {i}: {e}") from e
            uuids.append(_text(nvml.nvmlDeviceGetUUID(handle)))
        return uuids

    # -- reading ------------------------------------------------------------------------

    def _query(self, gpu: _Gpu, key: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(gpu.handle, *args)``, or None when ``key`` is (now known) unsupported."""
        if key in gpu.unsupported:
            return None
        try:
            return fn(gpu.handle, *args)
        except self._nvml.NVMLError as e:
            if getattr(e, "value", None) in self._skip_codes:
                logger.debug("nvml: %s: %s not available: %s", gpu.uuid, key, e)
                gpu.unsupported.add(key)
                return None
            raise SensorError(f"nvml: {gpu.uuid}: {key}: {e}") from e

    def _field_values(
        self, gpu: _Gpu, call_key: str, wanted: Mapping[str, FieldId]
    ) -> dict[str, _FieldValue]:
        """The successful field values among ``wanted`` (key -> field id or (id, scope))."""
        asked = {k: f for k, f in wanted.items() if k not in gpu.unsupported}
        if not asked:
            return {}
        values = self._query(
            gpu, call_key, self._nvml.nvmlDeviceGetFieldValues, list(asked.values())
        )
        if values is None:
            return {}
        found = {}
        for key, value in zip(asked, values, strict=False):
            if value.nvmlReturn == self._nvml.NVML_SUCCESS:
                member = self._value_members.get(value.valueType, "ullVal")
                found[key] = _FieldValue(getattr(value.value, member), int(value.timestamp))
            elif value.nvmlReturn in self._skip_codes:
                gpu.unsupported.add(key)
        return found

    def _power(self, gpu: _Gpu) -> tuple[float | None, str | None, int | None]:
        """Power in watts, its source and NVML's timestamp (None where there is none)."""
        nvml = self._nvml
        fields = self._field_values(
            gpu, "field_values", {"power_instant": nvml.NVML_FI_DEV_POWER_INSTANT}
        )
        instant = fields.get("power_instant")
        if instant is not None:
            return instant.value / 1000.0, "nvml_instant", instant.timestamp_us
        usage_mw = self._query(gpu, "power_usage", nvml.nvmlDeviceGetPowerUsage)
        if usage_mw is None:
            return None, None, None
        return usage_mw / 1000.0, "nvml_average", None

    def _nvlink(self, gpu: _Gpu) -> tuple[int | None, int | None]:
        """NVLink data sent and received (KiB, over all links), where supported."""
        nvml = self._nvml
        wanted: dict[str, FieldId] = {
            "nvlink_tx": (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS_SCOPE),
            "nvlink_rx": (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS_SCOPE),
        }
        fields = self._field_values(gpu, "nvlink_field_values", wanted)
        tx, rx = fields.get("nvlink_tx"), fields.get("nvlink_rx")
        return (
            None if tx is None else int(tx.value),
            None if rx is None else int(rx.value),
        )

    def _pcie_due(self) -> list[_Gpu]:
        """The GPUs whose PCIe throughput this ``read()`` takes."""
        able = [g for g in self._gpus if not {"pcie_tx", "pcie_rx"} <= g.unsupported]
        if self._pcie_interval_s <= 0:
            return able
        now = self._clock()
        due = [g for g in able if now - g.pcie_read_s >= self._pcie_interval_s]
        return [min(due, key=lambda g: g.pcie_read_s)] if due else []

    def _pcie(self, gpu: _Gpu) -> tuple[int | None, int | None]:
        """PCIe throughput sent and received (KB/s), where supported."""
        nvml = self._nvml
        gpu.pcie_read_s = self._clock()
        tx = self._query(
            gpu, "pcie_tx", nvml.nvmlDeviceGetPcieThroughput, nvml.NVML_PCIE_UTIL_TX_BYTES
        )
        rx = self._query(
            gpu, "pcie_rx", nvml.nvmlDeviceGetPcieThroughput, nvml.NVML_PCIE_UTIL_RX_BYTES
        )
        return (None if tx is None else int(tx), None if rx is None else int(rx))

    def _clocks_event_reasons_fn(self) -> Callable[..., Any]:
        # nvidia-ml-py before 12.535 only has the older name of the same call.
        nvml = self._nvml
        fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        return fn if fn is not None else nvml.nvmlDeviceGetCurrentClocksThrottleReasons  # type: ignore[no-any-return]
