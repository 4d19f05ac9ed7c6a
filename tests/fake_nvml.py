"""A fake of the part of nvidia-ml-py (``pynvml``) that the NVML sensor calls.

Shaped like the real library only: the same function names and signatures (a test
checks every public name here against the real module with ``inspect``), the real
constants and error classes (re-exported from ``pynvml``, which imports fine without a
GPU), and the real ctypes structures as return values (``c_nvmlFieldValue_t``,
``c_nvmlMemory_t``, ``c_nvmlUtilization_t``, ``nvmlPciInfo_t``).

Test controls are named ``fake_*``: the GPUs, the fake clock (``fake_now_s``,
``fake_advance``), call counts (``fake_calls``), the init error, ``fake_root``
(False: every setter answers NoPermission, as NVML does for a user who is not root),
and what one energy-counter call costs (``fake_energy_call_s``: about 4 ms on an H200;
``fake_energy_call_busy``: spent on the CPU, else waited out), for benchmarks.

The setters (power limit, locked clocks) change the fake GPU. For a node script run in
another process, ``fake_save``/``from_state_file`` keep the GPUs in a JSON file that
every setter rewrites (``RTK_FAKE_NVML=.../fake_nvml.py:from_state_file`` with
``FAKE_NVML_STATE`` naming the file; see ``toolkit/node/gpu_control.py``). In that name
``{host}`` stands for the host name, so one setting serves every node of a sandbox.

A GPU with a ``draw_w`` draws that much, or its power limit when lower, by the wall
clock (``fake_wall_s``, ``time.time`` unless a test sets another): its energy counter
reads ``energy_mj`` plus that power times the seconds since ``fake_stamp_s``. Every
setter first folds the energy up to now into ``energy_mj`` and stamps anew, so the
counter never goes back, and the state file carries the stamp: processes that read the
counter one after another see energy that depends on the limits set meanwhile.
"""

# The names are pynvml's own (camelCase), so that the fake matches the real API.
# ruff: noqa: N802, N803

from __future__ import annotations

import dataclasses
import json
import os
import socket
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter, sleep
from typing import Any

import pynvml as _real
from pynvml import (
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
    NVML_DEVICE_MIG_DISABLE,
    NVML_DEVICE_MIG_ENABLE,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    NVML_ERROR_UNKNOWN,
    NVML_FEATURE_DISABLED,
    NVML_FEATURE_ENABLED,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    NVML_FI_DEV_POWER_INSTANT,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    NVML_NVLINK_MAX_LINKS,
    NVML_PCIE_UTIL_RX_BYTES,
    NVML_PCIE_UTIL_TX_BYTES,
    NVML_SUCCESS,
    NVML_TEMPERATURE_GPU,
    NVML_VALUE_TYPE_DOUBLE,
    NVML_VALUE_TYPE_SIGNED_INT,
    NVML_VALUE_TYPE_SIGNED_LONG_LONG,
    NVML_VALUE_TYPE_UNSIGNED_INT,
    NVML_VALUE_TYPE_UNSIGNED_LONG,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    NVML_VALUE_TYPE_UNSIGNED_SHORT,
    NVML_VOLATILE_ECC,
    NVMLError,
    NVMLError_FunctionNotFound,
    NVMLError_GpuIsLost,
    NVMLError_LibraryNotFound,
    NVMLError_NoPermission,
    NVMLError_NotFound,
    NVMLError_NotSupported,
    NVMLError_Uninitialized,
    NVMLError_Unknown,
)

MAX_MIG_DEVICES = 7  # what NVML reports for an A100/H100


def sawtooth_power_mw(t_s: float) -> int:
    """A power draw that changes over time: 100 W rising to 400 W every 2 s."""
    return 100_000 + int(150_000 * (t_s % 2.0))


@dataclass
class FakeGpu:
    """One fake GPU. ``unsupported``/``no_permission``/``errors`` name pynvml functions."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    serial: str = "1654923000001"
    pci_bus_id: str = "00000000:18:00.0"
    memory_total_bytes: int = 80 * 1024**3
    memory_used_bytes: int = 3 * 1024**3
    power_limit_mw: int = 700_000  # the management limit; the enforced limit here too
    default_power_limit_mw: int = 700_000
    power_limit_min_mw: int = 200_000
    power_limit_max_mw: int = 700_000
    power_mw: Callable[[float], int] = sawtooth_power_mw
    average_power_mw: int = 250_000
    energy_mj: int = 5_000_000
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    max_sm_clock_mhz: int = 1980
    max_mem_clock_mhz: int = 2619
    gpu_locked_clocks_mhz: tuple[int, int] | None = None
    mem_locked_clocks_mhz: tuple[int, int] | None = None
    temperature_c: int = 41
    gpu_util_pct: int = 87
    mem_util_pct: int = 35
    clocks_event_reasons: int = 0
    pcie_tx_kbs: int = 1200
    pcie_rx_kbs: int = 3400
    nvlink_tx_kib: int = 10_000
    nvlink_rx_kib: int = 20_000
    unsupported: set[str] = field(default_factory=set)
    no_permission: set[str] = field(default_factory=set)
    errors: dict[str, int] = field(default_factory=dict)
    unsupported_fields: set[int] = field(default_factory=set)
    mig_capable: bool = True
    mig_enabled: bool = False
    mig_uuids: list[str] = field(default_factory=list)
    persistence_mode: bool = True
    ecc_enabled: bool = True
    ecc_volatile_uncorrected: int = 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # corr, uncorr, pending, failure
    pcie_gen: int = 5
    pcie_gen_max: int = 5
    pcie_width: int = 16
    pcie_width_max: int = 16
    nvlink_active: list[bool] = field(default_factory=lambda: [True] * 18)  # an H100 SXM
    draw_w: float | None = None  # what it draws by the wall clock, up to its limit (None: no)


@dataclass(frozen=True)
class FakeHandle:
    """Stands for a ``c_nvmlDevice_t``: a GPU, or one of its MIG devices."""

    gpu: FakeGpu
    mig_index: int | None = None


class FakeNvml:
    """An object shaped like the ``pynvml`` module, over a list of fake GPUs."""

    # The real constants and error classes, so codes and ``except`` clauses match exactly.
    NVML_SUCCESS = NVML_SUCCESS
    NVML_ERROR_UNINITIALIZED = NVML_ERROR_UNINITIALIZED
    NVML_ERROR_INVALID_ARGUMENT = NVML_ERROR_INVALID_ARGUMENT
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = NVML_ERROR_NO_PERMISSION
    NVML_ERROR_NOT_FOUND = NVML_ERROR_NOT_FOUND
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_FUNCTION_NOT_FOUND = NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_UNKNOWN = NVML_ERROR_UNKNOWN
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_PCIE_UTIL_TX_BYTES = NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = NVML_PCIE_UTIL_RX_BYTES
    NVML_DEVICE_MIG_DISABLE = NVML_DEVICE_MIG_DISABLE
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
    NVML_FI_DEV_POWER_INSTANT = NVML_FI_DEV_POWER_INSTANT
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
    NVML_VALUE_TYPE_DOUBLE = NVML_VALUE_TYPE_DOUBLE
    NVML_VALUE_TYPE_UNSIGNED_INT = NVML_VALUE_TYPE_UNSIGNED_INT
    NVML_VALUE_TYPE_UNSIGNED_LONG = NVML_VALUE_TYPE_UNSIGNED_LONG
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = NVML_VALUE_TYPE_SIGNED_LONG_LONG
    NVML_VALUE_TYPE_SIGNED_INT = NVML_VALUE_TYPE_SIGNED_INT
    NVML_VALUE_TYPE_UNSIGNED_SHORT = NVML_VALUE_TYPE_UNSIGNED_SHORT
    NVML_FEATURE_DISABLED = NVML_FEATURE_DISABLED
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS
    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_Unknown = NVMLError_Unknown

    def __init__(
        self,
        gpus: Sequence[FakeGpu] = (),
        *,
        init_error: int | None = None,
        strings_as_bytes: bool = False,
        root: bool = True,
        state_file: Path | None = None,
    ) -> None:
        self.fake_gpus = list(gpus)
        self.fake_root = root  # False: every setter answers NoPermission
        self.fake_state_file = state_file  # rewritten by every setter when set
        self.fake_init_error = init_error
        self.fake_strings_as_bytes = strings_as_bytes  # nvidia-ml-py < 11.515 returned bytes
        self.fake_now_s = 1_795_250_000.0  # NVML timestamps are wall-clock microseconds
        self.fake_calls: Counter[tuple[str, str]] = Counter()
        self.fake_init_count = 0
        self.fake_driver_version = "550.54.15"
        self.fake_cuda_driver_version = 12040
        self.fake_unsupported: set[str] = set()  # system (not per-GPU) functions
        # What one nvmlDeviceGetTotalEnergyConsumption call costs: seconds, and whether
        # they are spent on the CPU (a spin) or waited out (a sleep).
        self.fake_energy_call_s = 0.0
        self.fake_energy_call_busy = True
        # The wall clock that GPUs with a draw_w count energy by, and when it was read last.
        self.fake_wall_s: Callable[[], float] = time.time
        self.fake_stamp_s = self.fake_wall_s()

    # -- test controls ------------------------------------------------------------------

    def fake_advance(self, dt_s: float) -> None:
        """Let ``dt_s`` pass: the clock moves and every energy counter counts up."""
        for gpu in self.fake_gpus:
            gpu.energy_mj += int(gpu.power_mw(self.fake_now_s) * dt_s)
        self.fake_now_s += dt_s

    def fake_count(self, function: str, uuid: str | None = None) -> int:
        """How many times ``function`` was called (for one GPU, or in all)."""
        return sum(
            n for (f, u), n in self.fake_calls.items() if f == function and uuid in (None, u)
        )

    def fake_settings(self) -> list[tuple[int, tuple[int, int] | None, tuple[int, int] | None]]:
        """Per GPU: the power limit (mW) and the GPU and memory locked clocks (or None)."""
        return [
            (g.power_limit_mw, g.gpu_locked_clocks_mhz, g.mem_locked_clocks_mhz)
            for g in self.fake_gpus
        ]

    def fake_save(self, path: Path | None = None) -> None:
        """Write the GPUs (all but ``power_mw``), ``fake_root`` and the stamp to ``path``.

        Atomically: a process that reads the file meanwhile sees it before or after.
        """
        target = Path(path or self.fake_state_file or "")
        assert target.name
        gpus = []
        for gpu in self.fake_gpus:
            row = {f.name: getattr(gpu, f.name) for f in dataclasses.fields(gpu)}
            del row["power_mw"]
            gpus.append({k: sorted(v) if isinstance(v, set) else v for k, v in row.items()})
        state = {"root": self.fake_root, "stamp_s": self.fake_stamp_s, "gpus": gpus}
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        with os.fdopen(fd, "w") as f:
            json.dump(state, f)
        os.replace(temp, target)

    def fake_energy_mj(self, gpu: FakeGpu) -> int:
        """``gpu``'s energy counter now: ``energy_mj``, plus its draw since the stamp."""
        if gpu.draw_w is None:
            return gpu.energy_mj
        power_mw = min(gpu.draw_w * 1000, gpu.power_limit_mw)
        return gpu.energy_mj + int(max(0.0, self.fake_wall_s() - self.fake_stamp_s) * power_mw)

    def _fold(self) -> None:
        """Count every GPU's energy up to now into ``energy_mj``; stamp now."""
        now = max(self.fake_stamp_s, self.fake_wall_s())
        for gpu in self.fake_gpus:
            gpu.energy_mj = self.fake_energy_mj(gpu)
        self.fake_stamp_s = now

    def _enter(self, function: str, handle: FakeHandle | None = None) -> FakeGpu | None:
        uuid = "" if handle is None else handle.gpu.uuid
        self.fake_calls[(function, uuid)] += 1
        if self.fake_init_count <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if handle is None:
            if function in self.fake_unsupported:
                raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
            return None
        gpu = handle.gpu
        if function in gpu.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if function in gpu.no_permission:
            raise NVMLError(NVML_ERROR_NO_PERMISSION)
        if function in gpu.errors:
            raise NVMLError(gpu.errors[function])
        return gpu

    def _string(self, text: str) -> str | bytes:
        return text.encode() if self.fake_strings_as_bytes else text

    # -- the pynvml API -----------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.fake_calls[("nvmlInit", "")] += 1
        if self.fake_init_error is not None:
            raise NVMLError(self.fake_init_error)
        self.fake_init_count += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.fake_init_count -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.fake_gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.fake_gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(self.fake_gpus[index])

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str | bytes:
        self._enter("nvmlDeviceGetUUID", handle)
        if handle.mig_index is not None:
            return self._string(handle.gpu.mig_uuids[handle.mig_index])
        return self._string(handle.gpu.uuid)

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str | bytes:
        return self._string(self._gpu("nvmlDeviceGetName", handle).name)

    def nvmlDeviceGetSerial(self, handle: FakeHandle) -> str | bytes:
        return self._string(self._gpu("nvmlDeviceGetSerial", handle).serial)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: Any = None) -> Any:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        used, total = gpu.memory_used_bytes, gpu.memory_total_bytes
        return _real.c_nvmlMemory_t(total=total, free=total - used, used=used)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> Any:
        gpu = self._gpu("nvmlDeviceGetPciInfo", handle)
        bus_id = gpu.pci_bus_id.encode()
        return _real.nvmlPciInfo_t(busIdLegacy=bus_id, busId=bus_id)

    def nvmlDeviceGetMigMode(self, device: FakeHandle) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetMigMode", device)
        if not gpu.mig_capable:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        mode = NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: FakeHandle) -> int:
        gpu = self._gpu("nvmlDeviceGetMaxMigDeviceCount", device)
        if not gpu.mig_capable:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return MAX_MIG_DEVICES

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: FakeHandle, index: int) -> FakeHandle:
        gpu = self._gpu("nvmlDeviceGetMigDeviceHandleByIndex", device)
        if not gpu.mig_enabled or index >= MAX_MIG_DEVICES:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(gpu.mig_uuids):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return FakeHandle(gpu, index)

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, fieldIds: Sequence[Any]) -> Any:
        gpu = self._gpu("nvmlDeviceGetFieldValues", handle)
        values = (_real.c_nvmlFieldValue_t * len(fieldIds))()
        for value, requested in zip(values, fieldIds, strict=True):
            field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
            value.fieldId, value.scopeId = field_id, scope
            value.timestamp = int(self.fake_now_s * 1_000_000)
            value.latencyUsec = 0
            if field_id in gpu.unsupported_fields:
                value.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
            elif field_id == NVML_FI_DEV_POWER_INSTANT:
                value.valueType = NVML_VALUE_TYPE_UNSIGNED_INT
                value.value.uiVal = gpu.power_mw(self.fake_now_s)
                value.nvmlReturn = NVML_SUCCESS
            elif field_id in (
                NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
            ):
                value.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                tx = field_id == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
                value.value.ullVal = gpu.nvlink_tx_kib if tx else gpu.nvlink_rx_kib
                value.nvmlReturn = NVML_SUCCESS
            else:
                value.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
        return values

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", handle).average_power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        gpu = self._gpu("nvmlDeviceGetTotalEnergyConsumption", handle)
        if self.fake_energy_call_s > 0:
            _spend(self.fake_energy_call_s, self.fake_energy_call_busy)
        return self.fake_energy_mj(gpu)

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, type: int) -> int:
        gpu = self._gpu("nvmlDeviceGetClockInfo", handle)
        if type == NVML_CLOCK_SM:
            return _clamp(gpu.sm_clock_mhz, gpu.gpu_locked_clocks_mhz)
        if type == NVML_CLOCK_MEM:
            return _clamp(gpu.mem_clock_mhz, gpu.mem_locked_clocks_mhz)
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetMaxClockInfo(self, handle: FakeHandle, type: int) -> int:
        gpu = self._gpu("nvmlDeviceGetMaxClockInfo", handle)
        if type == NVML_CLOCK_SM:
            return gpu.max_sm_clock_mhz
        if type == NVML_CLOCK_MEM:
            return gpu.max_mem_clock_mhz
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByUUID")
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in self.fake_gpus:
            if gpu.uuid == text:
                return FakeHandle(gpu)
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetPowerManagementLimit(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetPowerManagementLimit", handle).power_limit_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetPowerManagementDefaultLimit", handle).default_power_limit_mw

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: FakeHandle) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetPowerManagementLimitConstraints", handle)
        return [gpu.power_limit_min_mw, gpu.power_limit_max_mw]

    def nvmlDeviceSetPowerManagementLimit(self, handle: FakeHandle, limit: int) -> None:
        gpu = self._setter("nvmlDeviceSetPowerManagementLimit", handle)
        if not gpu.power_limit_min_mw <= limit <= gpu.power_limit_max_mw:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu.power_limit_mw = int(limit)
        self._saved()

    def nvmlDeviceSetGpuLockedClocks(
        self, handle: FakeHandle, minGpuClockMHz: int, maxGpuClockMHz: int
    ) -> None:
        gpu = self._setter("nvmlDeviceSetGpuLockedClocks", handle)
        if not 0 < minGpuClockMHz <= maxGpuClockMHz:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu.gpu_locked_clocks_mhz = (int(minGpuClockMHz), int(maxGpuClockMHz))
        self._saved()

    def nvmlDeviceResetGpuLockedClocks(self, handle: FakeHandle) -> None:
        self._setter("nvmlDeviceResetGpuLockedClocks", handle).gpu_locked_clocks_mhz = None
        self._saved()

    def nvmlDeviceSetMemoryLockedClocks(
        self, handle: FakeHandle, minMemClockMHz: int, maxMemClockMHz: int
    ) -> None:
        gpu = self._setter("nvmlDeviceSetMemoryLockedClocks", handle)
        if not 0 < minMemClockMHz <= maxMemClockMHz:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu.mem_locked_clocks_mhz = (int(minMemClockMHz), int(maxMemClockMHz))
        self._saved()

    def nvmlDeviceResetMemoryLockedClocks(self, handle: FakeHandle) -> None:
        self._setter("nvmlDeviceResetMemoryLockedClocks", handle).mem_locked_clocks_mhz = None
        self._saved()

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Any:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        if gpu.mig_enabled:  # as on real GPUs: no utilisation in MIG mode
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return _real.c_nvmlUtilization_t(gpu=gpu.gpu_util_pct, memory=gpu.mem_util_pct)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksEventReasons", handle).clocks_event_reasons

    def nvmlDeviceGetPcieThroughput(self, device: FakeHandle, counter: int) -> int:
        gpu = self._gpu("nvmlDeviceGetPcieThroughput", device)
        if counter == NVML_PCIE_UTIL_TX_BYTES:
            return gpu.pcie_tx_kbs
        if counter == NVML_PCIE_UTIL_RX_BYTES:
            return gpu.pcie_rx_kbs
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._enter("nvmlSystemGetDriverVersion")
        return self._string(self.fake_driver_version)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.fake_cuda_driver_version

    def nvmlDeviceGetIndex(self, handle: FakeHandle) -> int:
        return self.fake_gpus.index(self._gpu("nvmlDeviceGetIndex", handle))

    def nvmlDeviceGetPersistenceMode(self, handle: FakeHandle) -> int:
        gpu = self._gpu("nvmlDeviceGetPersistenceMode", handle)
        return NVML_FEATURE_ENABLED if gpu.persistence_mode else NVML_FEATURE_DISABLED

    def nvmlDeviceGetEccMode(self, handle: FakeHandle) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetEccMode", handle)
        mode = NVML_FEATURE_ENABLED if gpu.ecc_enabled else NVML_FEATURE_DISABLED
        return [mode, mode]

    def nvmlDeviceGetTotalEccErrors(
        self, handle: FakeHandle, errorType: int, counterType: int
    ) -> int:
        gpu = self._gpu("nvmlDeviceGetTotalEccErrors", handle)
        if not gpu.ecc_enabled:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if (errorType, counterType) != (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC):
            return 0
        return gpu.ecc_volatile_uncorrected

    def nvmlDeviceGetRemappedRows(self, device: FakeHandle) -> tuple[int, int, int, int]:
        return self._gpu("nvmlDeviceGetRemappedRows", device).remapped_rows

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_gen

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_gen_max

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_width_max

    def nvmlDeviceGetNvLinkState(self, device: FakeHandle, link: int) -> int:
        gpu = self._gpu("nvmlDeviceGetNvLinkState", device)
        if not 0 <= link < len(gpu.nvlink_active):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return NVML_FEATURE_ENABLED if gpu.nvlink_active[link] else NVML_FEATURE_DISABLED

    def _setter(self, function: str, handle: FakeHandle) -> FakeGpu:
        gpu = self._gpu(function, handle)
        if not self.fake_root:
            raise NVMLError(NVML_ERROR_NO_PERMISSION)
        self._fold()  # the energy so far was drawn at the settings before this one
        return gpu

    def _saved(self) -> None:
        if self.fake_state_file is not None:
            self.fake_save()

    def _gpu(self, function: str, handle: FakeHandle) -> FakeGpu:
        gpu = self._enter(function, handle)
        assert gpu is not None
        if handle.mig_index is not None:  # only the UUID is asked of MIG handles here
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu


def _spend(seconds: float, busy: bool) -> None:
    """Take ``seconds``: on the CPU (``busy``), or asleep."""
    if not busy:
        sleep(seconds)
        return
    until = perf_counter() + seconds
    while perf_counter() < until:
        pass


def _clamp(mhz: int, locked: tuple[int, int] | None) -> int:
    return mhz if locked is None else min(max(mhz, locked[0]), locked[1])


def from_state_file(path: str | Path | None = None) -> FakeNvml:
    """A fake over the GPUs that ``fake_save`` wrote (``path`` or ``$FAKE_NVML_STATE``).

    Its setters write the file back, so a later process sees their changes.
    """
    name = str(path or os.environ["FAKE_NVML_STATE"])
    target = Path(name.replace("{host}", socket.gethostname()))
    state = json.loads(target.read_text())
    defaults = FakeGpu(uuid="")
    gpus = []
    for row in state["gpus"]:
        values: dict[str, Any] = {}
        for key, value in row.items():
            default = getattr(defaults, key)
            if isinstance(default, set):
                value = set(value)
            elif value is not None and (isinstance(default, tuple) or key.endswith("_clocks_mhz")):
                value = tuple(value)  # JSON gives lists back
            values[key] = value
        gpus.append(FakeGpu(**values))
    fake = FakeNvml(gpus, root=state["root"], state_file=target)
    fake.fake_stamp_s = state.get("stamp_s", fake.fake_stamp_s)
    return fake
