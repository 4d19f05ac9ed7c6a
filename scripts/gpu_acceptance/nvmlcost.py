"""What one NVML sensor reading costs: calls and microseconds, and batched field reads.

``CountingNvml`` wraps the ``pynvml`` module (or anything shaped like it) and counts
and times every ``nvml*`` call made through it, so ``NvmlSensor(nvml=CountingNvml(...))``
says exactly which calls one ``read()`` makes per GPU and what each costs.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

# The values compared one call each against one nvmlDeviceGetFieldValues call:
# (label, field constant, the single call that reads the same value).
BATCH = (
    ("power_instant_mw", "NVML_FI_DEV_POWER_INSTANT", None),
    ("energy_mj", "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "nvmlDeviceGetTotalEnergyConsumption"),
    ("power_limit_mw", "NVML_FI_DEV_POWER_CURRENT_LIMIT", "nvmlDeviceGetEnforcedPowerLimit"),
    ("power_average_mw", "NVML_FI_DEV_POWER_AVERAGE", "nvmlDeviceGetPowerUsage"),
)


_MEMBERS = {
    "NVML_VALUE_TYPE_DOUBLE": "dVal",
    "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal",
    "NVML_VALUE_TYPE_SIGNED_INT": "siVal",
}


def field_number(nvml: Any, value: Any) -> float:
    """The number a ``c_nvmlFieldValue_t`` holds, read from the member its type names."""
    for const, member in _MEMBERS.items():
        if getattr(nvml, const, object()) == value.valueType:
            return float(getattr(value.value, member))
    return float(value.value.ullVal)


class CountingNvml:
    """``nvml`` with every ``nvml*`` function counted and timed."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self.calls: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._nvml, name)
        if not (name.startswith("nvml") and callable(value)):
            return value
        calls, seconds = self.calls, self.seconds

        def counted(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                calls[name] += 1
                seconds[name] += time.perf_counter() - began

        return counted

    def reset(self) -> None:
        """Forget the calls so far."""
        self.calls.clear()
        self.seconds.clear()

    def per_call(self, reads: int, gpus: int) -> dict[str, dict[str, float]]:
        """Per function: calls per read per GPU and microseconds per call."""
        return {
            name: {
                "calls_per_read_per_gpu": count / reads / gpus,
                "us_per_call": self.seconds[name] / count * 1e6,
            }
            for name, count in sorted(self.calls.items())
        }


def time_reads(
    read: Callable[[], Any], counting: CountingNvml, reads: int, gpus: int
) -> dict[str, Any]:
    """Call ``read`` ``reads`` times; microseconds and NVML calls per read per GPU."""
    counting.reset()
    began = time.perf_counter()
    for _ in range(reads):
        read()
    elapsed_s = time.perf_counter() - began
    calls = sum(counting.calls.values())
    return {
        "reads": reads,
        "us_per_read_per_gpu": elapsed_s / reads / gpus * 1e6,
        "nvml_calls_per_read_per_gpu": calls / reads / gpus,
        "nvml_us_per_read_per_gpu": sum(counting.seconds.values()) / reads / gpus * 1e6,
        "functions": counting.per_call(reads, gpus),
    }


def sensor_cost(nvml: Any, reads: int) -> dict[str, Any]:
    """The NVML sensor's cost per reading: ``read()`` and ``read_power()``, per GPU.

    The first ``read()`` also takes each GPU's PCIe throughput (a 20 ms sample per
    counter); later ones in this loop do not (rtk reads PCIe at most once a second
    per GPU), so the first read is reported on its own.
    """
    from toolkit.telemetry.sensors.nvml import NvmlSensor

    counting = CountingNvml(nvml)
    sensor = NvmlSensor(nvml=counting, pcie_interval_s=1e9)
    try:
        gpus = len(sensor.devices())
        counting.reset()
        began = time.perf_counter()
        sensor.read()
        first = {
            "ms": (time.perf_counter() - began) * 1e3,
            "nvml_calls": sum(counting.calls.values()),
            "functions": counting.per_call(1, gpus),
        }
        for _ in range(5):  # warm
            sensor.read()
        full = time_reads(sensor.read, counting, reads, gpus)
        power = time_reads(sensor.read_power, counting, reads, gpus)
    finally:
        sensor.close()
    return {"gpus": gpus, "first_read_with_pcie": first, "read": full, "read_power": power}


def batched_cost(nvml: Any, reads: int) -> dict[str, Any]:
    """The same values read one call each and in one ``nvmlDeviceGetFieldValues`` call."""
    fields = [
        (label, getattr(nvml, const), single)
        for label, const, single in BATCH
        if hasattr(nvml, const)
    ]
    nvml.nvmlInit()
    try:
        handles = [
            nvml.nvmlDeviceGetHandleByIndex(i) for i in range(int(nvml.nvmlDeviceGetCount()))
        ]

        def one_by_one() -> dict[str, Any]:
            values: dict[str, Any] = {}
            for handle in handles:
                for label, field_id, single in fields:
                    if single is None:
                        values[label] = nvml.nvmlDeviceGetFieldValues(handle, [field_id])[0]
                    else:
                        values[label] = getattr(nvml, single)(handle)
            return values

        def batched() -> list[Any]:
            return [
                nvml.nvmlDeviceGetFieldValues(handle, [f for _, f, _ in fields])
                for handle in handles
            ]

        one_by_one()
        batched()
        timings = {}
        for name, fn in (("one_call_each", one_by_one), ("batched", batched)):
            began = time.perf_counter()
            for _ in range(reads):
                fn()
            timings[name] = (time.perf_counter() - began) / reads / len(handles) * 1e6
        singles = one_by_one()
        batch = batched()[0]
    finally:
        nvml.nvmlShutdown()
    returns = {
        label: int(value.nvmlReturn) for (label, _, _), value in zip(fields, batch, strict=True)
    }
    agree = {}
    for (label, _, single), value in zip(fields, batch, strict=True):
        if single is None or value.nvmlReturn != nvml.NVML_SUCCESS:
            continue
        agree[label] = {
            "field_value": field_number(nvml, value),
            "single_call": int(singles[label]),
        }
    return {
        "values": [label for label, _, _ in fields],
        "us_per_gpu_one_call_each": timings["one_call_each"],
        "us_per_gpu_batched": timings["batched"],
        "batched_over_one_each": timings["batched"] / timings["one_call_each"],
        "field_returns": returns,
        "values_compared": agree,
    }
