"""Sensors: the host sensor on fixture trees and on this machine, NVML on a fake, the factory."""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fake_nvml
import numpy as np
import pynvml
import pytest
from conftest import REPO
from fake_nvml import FakeGpu, FakeNvml

from toolkit.errors import RtkError
from toolkit.rundir.reading import Reading
from toolkit.telemetry.sensors import (
    HostSensor,
    NvmlSensor,
    SensorError,
    describe_available,
    make_sensors,
    parse_kinds,
)
from toolkit.telemetry.sensors import nvml as nvml_module
from toolkit.telemetry.sensors.host import (
    BUSY_W_PER_CPU,
    IDLE_W_PER_CPU,
    IPMI_COMMAND,
    model_power_w,
    parse_ipmi_power_w,
    parse_proc_stat,
)

DATA = REPO / "tests" / "data"
POWERCAP = "sys/class/powercap"

# `ipmitool dcmi power reading` on a Dell PowerEdge (the layout ipmitool prints).
DCMI_OUTPUT = """
    Instantaneous power reading:                   220 Watts
    Minimum during sampling period:                 78 Watts
    Maximum during sampling period:                462 Watts
    Average power reading over sample period:      218 Watts
    IPMI timestamp:                           Thu Jan  4 10:21:52 2024
    Sampling period:                          00000001 Seconds.
    Power reading state is:                   activated

"""


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, t_s: float = 1000.0) -> None:
        self.t_s = t_s

    def __call__(self) -> float:
        return self.t_s

    def advance(self, dt_s: float) -> None:
        self.t_s += dt_s


def no_ipmi(argv: Sequence[str], timeout_s: float) -> str:
    raise FileNotFoundError(2, "No such file or directory", argv[0])


def make_root(tmp_path: Path, powercap: str | None, proc: str = "vm-2cpu") -> Path:
    """A file-system root in tmp: a recorded /proc, and a powercap fixture tree if named."""
    root = tmp_path / "root"
    shutil.copytree(DATA / "proc" / proc, root / "proc")
    if powercap is not None:
        shutil.copytree(DATA / "powercap" / powercap, root / POWERCAP)
    return root


def write_stat(root: Path, user: int, system: int, idle: int, iowait: int = 0) -> None:
    """A /proc/stat for 2 CPUs with the given aggregate times (ticks)."""
    per_cpu = f"{user // 2} 0 {system // 2} {idle // 2} {iowait // 2} 0 0 0 0 0"
    (root / "proc/stat").write_text(
        f"cpu  {user} 0 {system} {idle} {iowait} 0 0 0 0 0\n"
        f"cpu0 {per_cpu}\ncpu1 {per_cpu}\nintr 0\nctxt 0\nbtime 1795241491\n"
    )


def energy_path(root: Path, zone: str) -> Path:
    return root / POWERCAP / zone / "energy_uj"


def add_uj(root: Path, zone: str, delta_uj: int) -> None:
    path = energy_path(root, zone)
    path.write_text(f"{int(path.read_text()) + delta_uj}\n")


def as_json(readings: list[Reading]) -> list[dict[str, Any]]:
    """Readings as JSON (fields that are None left out), to compare and index."""
    assert all(isinstance(r, Reading) for r in readings)
    return [r.to_json() for r in readings]


def host_row(sensor: HostSensor) -> dict[str, Any]:
    rows = as_json(sensor.read())
    assert len(rows) == 1
    assert rows[0]["device"] == "host" and rows[0]["kind"] == "host"
    json.dumps(rows[0])
    return rows[0]


# -- host: RAPL -------------------------------------------------------------------------


def test_intel_two_sockets_package_and_dram(tmp_path: Path) -> None:
    root = make_root(tmp_path, "intel-2socket")
    sensor = HostSensor(str(root), ipmi_runner=no_ipmi)
    info = sensor.devices()["host"].to_json()
    zones = [(d["zone"], d["domain"]) for d in info["rapl_domains"]]
    # intel-rapl-mmio:0 mirrors package 0 and must not be counted twice.
    assert zones == [
        ("intel-rapl:0", "package"),
        ("intel-rapl:0:0", "dram"),
        ("intel-rapl:1", "package"),
        ("intel-rapl:1:0", "dram"),
    ]
    assert info["power_source"] == "rapl" and info["energy_source"] == "rapl"
    assert "ipmitool" in info["ipmi_reason"]
    first = host_row(sensor)
    assert first["rapl_package_j"] == 0.0 and first["rapl_dram_j"] == 0.0
    assert first["energy_j"] == 0.0

    add_uj(root, "intel-rapl:0", 1_500_000)
    add_uj(root, "intel-rapl:1", 500_000)
    add_uj(root, "intel-rapl:0:0", 250_000)
    add_uj(root, "intel-rapl:1:0", 250_000)
    add_uj(root, "intel-rapl-mmio:0", 9_000_000)
    row = host_row(sensor)
    assert row["rapl_package_j"] == pytest.approx(2.0)
    assert row["rapl_dram_j"] == pytest.approx(0.5)
    assert row["energy_j"] == pytest.approx(2.5)
    # RAPL gives energy, not power: power_w is left out rather than modelled.
    assert "power_w" not in row and "power_source" not in row
    assert as_json(sensor.read_power()) == []


def test_rapl_wraparound_is_corrected(tmp_path: Path) -> None:
    root = make_root(tmp_path, "intel-2socket")
    max_uj = int((root / POWERCAP / "intel-rapl:0/max_energy_range_uj").read_text())
    energy_path(root, "intel-rapl:0").write_text(f"{max_uj - 1_000_000}\n")
    sensor = HostSensor(str(root), ipmi_runner=no_ipmi)
    energy_path(root, "intel-rapl:0").write_text("500000\n")  # wrapped: 1.0 J + 0.5 J
    assert host_row(sensor)["rapl_package_j"] == pytest.approx(1.5)
    add_uj(root, "intel-rapl:0", 2_000_000)
    row = host_row(sensor)
    assert row["rapl_package_j"] == pytest.approx(3.5)
    assert row["energy_j"] == pytest.approx(3.5)


def test_amd_package_only(tmp_path: Path) -> None:
    root = make_root(tmp_path, "amd-epyc")
    sensor = HostSensor(str(root), ipmi_runner=no_ipmi)
    info = sensor.devices()["host"].to_json()
    assert [d["zone"] for d in info["rapl_domains"]] == ["intel-rapl:0"]  # core skipped
    add_uj(root, "intel-rapl:0", 3_000_000)
    add_uj(root, "intel-rapl:0:0", 2_000_000)
    row = host_row(sensor)
    assert row["rapl_package_j"] == pytest.approx(3.0)
    assert row["energy_j"] == pytest.approx(3.0)
    assert "rapl_dram_j" not in row


def test_client_psys_core_uncore_skipped(tmp_path: Path) -> None:
    root = make_root(tmp_path, "intel-client")
    sensor = HostSensor(str(root), ipmi_runner=no_ipmi)
    names = [d["name"] for d in sensor.devices()["host"].to_json()["rapl_domains"]]
    assert names == ["package-0", "dram"]
    for zone in ("intel-rapl:0:0", "intel-rapl:0:1", "intel-rapl:1"):  # core, uncore, psys
        add_uj(root, zone, 7_000_000)
    add_uj(root, "intel-rapl:0", 1_000_000)
    assert host_row(sensor)["energy_j"] == pytest.approx(1.0)


def test_no_powercap_means_model(tmp_path: Path) -> None:
    sensor = HostSensor(str(make_root(tmp_path, None)), ipmi_runner=no_ipmi)
    info = sensor.devices()["host"].to_json()
    assert info["power_source"] == "model" and info["energy_source"] == "model"
    assert info["rapl_reason"] == "no /sys/class/powercap"
    assert "no /sys/class/powercap" in info["power_source_reason"]
    assert info["rapl_domains"] == []
    # The figures it names are the ones the estimate is made with.
    idle_w, busy_w = info["model"]["idle_w_per_cpu"], info["model"]["busy_w_per_cpu"]
    assert model_power_w(1, 0.0) == idle_w and model_power_w(1, 100.0) == idle_w + busy_w
    json.dumps(info)


def test_powercap_without_zones(tmp_path: Path) -> None:
    sensor = HostSensor(str(make_root(tmp_path, "control-only")), ipmi_runner=no_ipmi)
    info = sensor.devices()["host"].to_json()
    assert info["power_source"] == "model"
    assert "no RAPL package zone" in info["rapl_reason"]


def test_unreadable_counter_means_no_rapl(tmp_path: Path) -> None:
    # Root reads any file, so "permission denied" is emulated by a counter that is a directory.
    root = make_root(tmp_path, "intel-2socket")
    energy_path(root, "intel-rapl:1").unlink()
    energy_path(root, "intel-rapl:1").mkdir()
    sensor = HostSensor(str(root), ipmi_runner=no_ipmi)
    info = sensor.devices()["host"].to_json()
    assert info["rapl_domains"] == []
    assert "intel-rapl:1" in info["rapl_reason"] and "Is a directory" in info["rapl_reason"]
    assert info["power_source"] == "model"
    row = host_row(sensor)
    assert not any(key.startswith("rapl_") for key in row)


def test_counter_vanishing_mid_run_is_an_error(tmp_path: Path) -> None:
    root = make_root(tmp_path, "amd-epyc")
    sensor = HostSensor(str(root), ipmi_runner=no_ipmi)
    energy_path(root, "intel-rapl:0").unlink()
    with pytest.raises(SensorError, match="intel-rapl:0/energy_uj") as caught:
        sensor.read()
    assert isinstance(caught.value, RtkError)


# -- host: CPU, memory, model -------------------------------------------------------------


def test_cpu_util_deltas_and_model_energy(tmp_path: Path) -> None:
    root = make_root(tmp_path, None)
    write_stat(root, user=1000, system=500, idle=8000, iowait=500)
    clock = Clock()
    sensor = HostSensor(str(root), ipmi_runner=no_ipmi, clock=clock)
    assert sensor.devices()["host"].to_json()["cpus"] == 2

    clock.advance(2.0)  # 400 busy ticks of 800; iowait counts as idle
    write_stat(root, user=1300, system=600, idle=8300, iowait=600)
    row = host_row(sensor)
    assert row["cpu_util_pct"] == 50.0
    half_w = model_power_w(2, 50.0)  # the model's estimate for 2 CPUs half busy
    assert row["power_w"] == pytest.approx(half_w)
    assert row["power_source"] == "model"
    assert row["energy_j"] == pytest.approx(half_w * 2.0)

    clock.advance(1.0)  # no tick counted: no utilisation, no power, the interval stays open
    row = host_row(sensor)
    assert "cpu_util_pct" not in row and "power_w" not in row
    assert row["energy_j"] == pytest.approx(half_w * 2.0)

    clock.advance(1.0)  # fully busy over the 2 s since the last moving reading
    write_stat(root, user=1900, system=800, idle=8300, iowait=600)
    row = host_row(sensor)
    assert row["cpu_util_pct"] == 100.0
    full_w = model_power_w(2, 100.0)
    assert row["power_w"] == pytest.approx(full_w)
    assert row["energy_j"] == pytest.approx(half_w * 2.0 + full_w * 2.0)


def test_first_read_without_ticks_has_no_utilisation(tmp_path: Path) -> None:
    sensor = HostSensor(str(make_root(tmp_path, None)), ipmi_runner=no_ipmi)
    row = host_row(sensor)  # the recorded /proc/stat has not moved since the sensor opened
    assert "cpu_util_pct" not in row
    assert row["energy_j"] == 0.0


def test_proc_stat_parse() -> None:
    times, cpus = parse_proc_stat((DATA / "proc/vm-2cpu/stat").read_text())
    assert cpus == 2
    assert times is not None and 0 < times.busy < times.total


def test_memory_from_meminfo(tmp_path: Path) -> None:
    text = (DATA / "proc/vm-2cpu/meminfo").read_text()
    kib = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+):\s+(\d+) kB$", text, re.M)}
    sensor = HostSensor(str(make_root(tmp_path, None)), ipmi_runner=no_ipmi)
    row = host_row(sensor)
    assert row["memory_total_bytes"] == kib["MemTotal"] * 1024
    assert row["memory_used_bytes"] == (kib["MemTotal"] - kib["MemAvailable"]) * 1024
    assert sensor.devices()["host"].to_json()["memory_total_bytes"] == kib["MemTotal"] * 1024


def test_model_power_grows_with_the_cpus_and_linearly_with_the_load() -> None:
    idle_w, full_w = model_power_w(1, 0.0), model_power_w(1, 100.0)
    assert 0.0 < idle_w < full_w
    assert model_power_w(1, 25.0) == pytest.approx(idle_w + 0.25 * (full_w - idle_w))
    assert model_power_w(4, 0.0) == pytest.approx(4 * idle_w)
    assert model_power_w(4, 100.0) == pytest.approx(4 * full_w)


def test_missing_proc_leaves_fields_out(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    sensor = HostSensor(str(empty), ipmi_runner=no_ipmi)
    info = sensor.devices()["host"].to_json()
    assert info["power_source"] is None and "cpus" not in info
    assert as_json(sensor.read()) == [{"device": "host", "kind": "host"}]


# -- host: IPMI --------------------------------------------------------------------------


def test_ipmi_parse() -> None:
    assert parse_ipmi_power_w(DCMI_OUTPUT) == 220.0
    assert parse_ipmi_power_w(DCMI_OUTPUT.replace("activated", "deactivated")) is None
    assert parse_ipmi_power_w("Error: Unable to establish IPMI v2 / RMCP+ session") is None


def test_ipmi_power_read_at_most_once_a_second(tmp_path: Path) -> None:
    calls: list[tuple[tuple[str, ...], float]] = []

    def runner(argv: Sequence[str], timeout_s: float) -> str:
        calls.append((tuple(argv), timeout_s))
        return DCMI_OUTPUT.replace("220 Watts", f"{200 + len(calls)} Watts")

    clock = Clock()
    sensor = HostSensor(str(make_root(tmp_path, None)), ipmi_runner=runner, clock=clock)
    assert calls == [(IPMI_COMMAND, calls[0][1])] and calls[0][1] <= 5.0  # the probe
    info = sensor.devices()["host"].to_json()
    assert info["power_source"] == "ipmi" and "model" not in info
    row = host_row(sensor)
    assert (row["power_w"], row["power_source"]) == (201.0, "ipmi")
    assert "energy_j" not in row  # no RAPL, and IPMI power is not integrated into energy
    clock.advance(0.5)
    assert host_row(sensor)["power_w"] == 201.0
    assert len(calls) == 1
    clock.advance(0.6)
    assert host_row(sensor)["power_w"] == 202.0
    assert len(calls) == 2


def test_ipmi_power_with_rapl_energy(tmp_path: Path) -> None:
    root = make_root(tmp_path, "intel-2socket")
    sensor = HostSensor(str(root), ipmi_runner=lambda argv, timeout_s: DCMI_OUTPUT)
    add_uj(root, "intel-rapl:0", 1_000_000)
    row = host_row(sensor)
    assert (row["power_w"], row["power_source"]) == (220.0, "ipmi")
    assert row["energy_j"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (subprocess.CalledProcessError(1, list(IPMI_COMMAND)), "failed"),
        (subprocess.TimeoutExpired(list(IPMI_COMMAND), 2.0), "timed out"),
        (None, "no instantaneous power reading"),
    ],
)
def test_ipmi_not_working_falls_back_to_model(
    tmp_path: Path, error: Exception | None, reason: str
) -> None:
    def runner(argv: Sequence[str], timeout_s: float) -> str:
        if error is not None:
            raise error
        return DCMI_OUTPUT.replace("activated", "deactivated")

    sensor = HostSensor(str(make_root(tmp_path, None)), ipmi_runner=runner)
    info = sensor.devices()["host"].to_json()
    assert info["power_source"] == "model"
    assert reason in info["ipmi_reason"]


def test_ipmi_failing_later_leaves_power_out(tmp_path: Path) -> None:
    answers = [DCMI_OUTPUT]

    def runner(argv: Sequence[str], timeout_s: float) -> str:
        if not answers:
            raise subprocess.TimeoutExpired(list(argv), timeout_s)
        return answers.pop()

    clock = Clock()
    sensor = HostSensor(str(make_root(tmp_path, None)), ipmi_runner=runner, clock=clock)
    clock.advance(1.5)
    row = host_row(sensor)
    assert "power_w" not in row and "power_source" not in row


# -- host: this machine ------------------------------------------------------------------


def test_host_sensor_on_this_machine() -> None:
    sensor = make_sensors("host")[0]
    assert isinstance(sensor, HostSensor)
    info = sensor.devices()["host"].to_json()
    json.dumps(info)
    assert info["cpus"] >= 1
    assert info["power_source"] in ("ipmi", "rapl", "model")
    if not Path("/sys/class/powercap").exists() and shutil.which("ipmitool") is None:
        assert info["power_source"] == "model"
    deadline = time.monotonic() + 3.0
    row = host_row(sensor)
    while "cpu_util_pct" not in row and time.monotonic() < deadline:
        sum(i * i for i in range(20_000))
        time.sleep(0.02)
        row = host_row(sensor)
    assert 0.0 <= row["cpu_util_pct"] <= 100.0
    assert 0 < row["memory_used_bytes"] <= row["memory_total_bytes"]
    if info["power_source"] == "model":
        cpus = info["cpus"]
        assert cpus * IDLE_W_PER_CPU <= row["power_w"] <= cpus * (IDLE_W_PER_CPU + BUSY_W_PER_CPU)
        assert row["energy_j"] > 0.0
    if info["energy_source"] == "rapl":
        assert row["energy_j"] >= 0.0
    sensor.close()


# -- NVML on the fake --------------------------------------------------------------------


def h100(index: int, **kwargs: Any) -> FakeGpu:
    uuid = f"GPU-{index:08x}-5d1c-c2cb-6a5e-1a2b3c4d5e6f"
    return FakeGpu(uuid=uuid, pci_bus_id=f"00000000:{0x18 + index:02X}:00.0", **kwargs)


def test_fake_matches_real_pynvml() -> None:
    fake = FakeNvml()
    functions = 0
    for name in dir(fake):
        if name.startswith(("_", "fake_")):
            continue
        ours, real = getattr(fake, name), getattr(pynvml, name, None)
        assert real is not None, f"the fake has {name}, pynvml does not"
        if inspect.isclass(ours):
            assert ours is real, name
        elif callable(ours):
            functions += 1
            ours_params = inspect.signature(ours).parameters.values()
            real_params = inspect.signature(real).parameters.values()
            assert [(p.name, p.kind, p.default) for p in ours_params] == [
                (p.name, p.kind, p.default) for p in real_params
            ], name
        else:
            assert ours == real, name
    assert functions >= 20


def test_sensor_uses_only_real_pynvml_names() -> None:
    source = Path(nvml_module.__file__).read_text()
    names = set(re.findall(r"nvml\.((?:nvml|NVML)\w+)", source))
    names |= set(re.findall(r'"(nvml[A-Z]\w+|NVML_[A-Z]\w+)"', source))
    assert {"nvmlDeviceGetFieldValues", "NVML_FI_DEV_POWER_INSTANT"} <= names
    assert sorted(n for n in names if not hasattr(pynvml, n)) == []


def test_fake_returns_real_structures() -> None:
    fake = FakeNvml([h100(0)])
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    values = fake.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_POWER_INSTANT])
    assert isinstance(values[0], pynvml.c_nvmlFieldValue_t)
    assert isinstance(fake.nvmlDeviceGetMemoryInfo(handle), pynvml.c_nvmlMemory_t)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetHandleByIndex(1)


def test_devices_keyed_by_uuid() -> None:
    fake = FakeNvml([h100(0), h100(1)])
    sensor = NvmlSensor(fake)
    devices = {key: info.to_json() for key, info in sensor.devices().items()}
    uuids = [h100(0).uuid, h100(1).uuid]
    assert list(devices) == uuids
    assert devices[uuids[1]] == {
        "kind": "gpu",
        "uuid": uuids[1],
        "nvml_index": 1,
        "name": "NVIDIA H100 80GB HBM3",
        "serial": "1654923000001",
        "memory_total_bytes": 80 * 1024**3,
        "power_limit_w": 700.0,
        "pci_bus_id": "00000000:19:00.0",
        "mig_mode": "disabled",
        "unsupported": [],
    }
    json.dumps(devices)
    assert [r["device"] for r in as_json(sensor.read())] == uuids
    assert [r["device"] for r in as_json(sensor.read_power())] == uuids


def test_bytes_from_old_bindings_are_decoded() -> None:
    sensor = NvmlSensor(FakeNvml([h100(0)], strings_as_bytes=True))
    info = sensor.devices()[h100(0).uuid].to_json()
    assert info["name"] == "NVIDIA H100 80GB HBM3" and info["pci_bus_id"] == "00000000:18:00.0"


def test_full_reading_units() -> None:
    gpu = h100(0, power_mw=lambda t: 312_345, energy_mj=5_000_123, clocks_event_reasons=0x4)
    fake = FakeNvml([gpu])
    row = as_json(NvmlSensor(fake, pcie_interval_s=0).read())[0]
    assert row == {
        "device": gpu.uuid,
        "kind": "gpu",
        "power_w": 312.345,
        "power_source": "nvml_instant",
        "nvml_ts_us": 1_795_250_000_000_000,
        "energy_j": 5000.123,
        "power_limit_w": 700.0,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "temperature_c": 41,
        "gpu_util_pct": 87,
        "mem_util_pct": 35,
        "memory_used_bytes": 3 * 1024**3,
        "memory_total_bytes": 80 * 1024**3,
        "clocks_event_reasons": 4,
        "pcie_tx_kbs": 1200,
        "pcie_rx_kbs": 3400,
        "nvlink_tx_kib": 10_000,
        "nvlink_rx_kib": 20_000,
    }


def test_instant_power_follows_nvml_time_and_energy_counts_up() -> None:
    fake = FakeNvml([h100(0)])
    sensor = NvmlSensor(fake)
    first = as_json(sensor.read_power())[0]
    assert first == {
        "device": h100(0).uuid,
        "kind": "gpu_power",
        "power_w": 100.0,
        "power_source": "nvml_instant",
        "nvml_ts_us": 1_795_250_000_000_000,
    }
    energy_before = as_json(sensor.read())[0]["energy_j"]
    fake.fake_advance(0.5)
    second = as_json(sensor.read_power())[0]
    assert second["nvml_ts_us"] - first["nvml_ts_us"] == 500_000
    assert second["power_w"] == 175.0
    assert as_json(sensor.read())[0]["energy_j"] - energy_before == pytest.approx(100.0 * 0.5)


def test_a_reading_without_energy_leaves_the_counter_out_and_uncalled() -> None:
    fake = FakeNvml([h100(0), h100(1)])
    sensor = NvmlSensor(fake, pcie_interval_s=0)
    without = as_json(sensor.read(energy=False))
    assert [r["device"] for r in without] == [h100(0).uuid, h100(1).uuid]
    assert all("energy_j" not in r and r["power_w"] > 0 for r in without)
    assert fake.fake_count("nvmlDeviceGetTotalEnergyConsumption") == 0
    with_energy = as_json(sensor.read())
    assert [r["energy_j"] for r in with_energy] == [5000.0, 5000.0]
    assert fake.fake_count("nvmlDeviceGetTotalEnergyConsumption") == 2
    # Apart from the counter, both readings have the same fields.
    assert [set(r) - {"energy_j"} for r in with_energy] == [set(r) for r in without]


def test_the_fake_energy_call_costs_what_it_is_told(monkeypatch: pytest.MonkeyPatch) -> None:
    # Benchmarks model an H200 (about 4 ms a call): asleep, or spent on the CPU.
    slept: list[float] = []
    monkeypatch.setattr(fake_nvml, "sleep", slept.append)
    clock = iter(np.arange(0.0, 1.0, 0.001))
    monkeypatch.setattr(fake_nvml, "perf_counter", lambda: float(next(clock)))
    fake = FakeNvml([h100(0)])
    sensor = NvmlSensor(fake)
    sensor.read()
    assert slept == [] and next(clock) == 0.0  # free unless told
    fake.fake_energy_call_s, fake.fake_energy_call_busy = 0.004, False
    sensor.read(energy=False)
    assert slept == []
    sensor.read()
    assert slept == [0.004]
    fake.fake_energy_call_busy = True
    sensor.read()
    assert slept == [0.004] and next(clock) >= 0.004  # it spun until 4 ms had passed


def test_average_power_when_instant_field_unsupported() -> None:
    fake = FakeNvml([h100(0, unsupported_fields={pynvml.NVML_FI_DEV_POWER_INSTANT})])
    sensor = NvmlSensor(fake)
    for _ in range(3):
        assert as_json(sensor.read_power()) == [
            {
                "device": h100(0).uuid,
                "kind": "gpu_power",
                "power_w": 250.0,
                "power_source": "nvml_average",
            }
        ]
    assert fake.fake_count("nvmlDeviceGetFieldValues") == 1  # not asked again
    assert fake.fake_count("nvmlDeviceGetPowerUsage") == 3
    assert "power_instant" in sensor.devices()[h100(0).uuid].to_json()["unsupported"]


def test_average_power_when_field_values_unsupported() -> None:
    fake = FakeNvml([h100(0, unsupported={"nvmlDeviceGetFieldValues"})])
    row = as_json(NvmlSensor(fake).read())[0]
    assert row["power_source"] == "nvml_average" and "nvml_ts_us" not in row
    assert "nvlink_tx_kib" not in row


def test_unsupported_fields_left_out_and_not_asked_again() -> None:
    gpu = h100(
        0,
        unsupported={
            "nvmlDeviceGetTemperature",
            "nvmlDeviceGetPcieThroughput",
            "nvmlDeviceGetCurrentClocksEventReasons",
        },
        no_permission={"nvmlDeviceGetSerial", "nvmlDeviceGetTotalEnergyConsumption"},
        unsupported_fields={
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        },
    )
    fake = FakeNvml([gpu])
    sensor = NvmlSensor(fake, pcie_interval_s=0)
    for _ in range(3):
        row = as_json(sensor.read())[0]
        for key in ("temperature_c", "pcie_tx_kbs", "pcie_rx_kbs", "clocks_event_reasons"):
            assert key not in row
        assert "energy_j" not in row and "nvlink_tx_kib" not in row
        assert row["power_source"] == "nvml_instant" and "sm_clock_mhz" in row
    assert fake.fake_count("nvmlDeviceGetTemperature") == 1
    assert fake.fake_count("nvmlDeviceGetTotalEnergyConsumption") == 1
    assert fake.fake_count("nvmlDeviceGetPcieThroughput") == 2  # TX and RX once each
    assert fake.fake_count("nvmlDeviceGetCurrentClocksEventReasons") == 1
    info = sensor.devices()[gpu.uuid].to_json()
    assert "serial" not in info
    assert set(info["unsupported"]) >= {"serial", "energy", "temperature", "pcie_tx", "nvlink_tx"}


def test_unexpected_nvml_error_raises_sensor_error() -> None:
    gpu = h100(0, errors={"nvmlDeviceGetTotalEnergyConsumption": pynvml.NVML_ERROR_GPU_IS_LOST})
    sensor = NvmlSensor(FakeNvml([gpu]))
    with pytest.raises(SensorError, match="GPU is lost") as caught:
        sensor.read()
    assert gpu.uuid in str(caught.value)
    assert isinstance(caught.value, RtkError)
    assert isinstance(caught.value.__cause__, pynvml.NVMLError_GpuIsLost)
    assert as_json(sensor.read_power())  # the power path still works


def test_mig_readings_stay_on_the_parent() -> None:
    migs = ["MIG-0a1b2c3d-0000-5111-a222-333344445555", "MIG-0a1b2c3d-0001-5111-a222-333344445555"]
    parent = h100(0, mig_enabled=True, mig_uuids=migs)
    l4 = h100(1, name="NVIDIA L4", mig_capable=False)
    fake = FakeNvml([parent, l4])
    sensor = NvmlSensor(fake)
    devices = {key: info.to_json() for key, info in sensor.devices().items()}
    assert list(devices) == [parent.uuid, l4.uuid]  # MIG devices are not devices of their own
    assert devices[parent.uuid]["mig_mode"] == "enabled"
    assert devices[parent.uuid]["mig_devices"] == migs
    assert "mig_mode" not in devices[l4.uuid] and "mig_devices" not in devices[l4.uuid]
    rows = {r["device"]: r for r in as_json(sensor.read())}
    assert set(rows) == {parent.uuid, l4.uuid}
    mig_row = rows[parent.uuid]
    for key in ("power_w", "energy_j", "sm_clock_mhz", "temperature_c", "memory_used_bytes"):
        assert key in mig_row
    assert "gpu_util_pct" not in mig_row and "mem_util_pct" not in mig_row
    assert fake.fake_count("nvmlDeviceGetUtilizationRates", parent.uuid) == 0
    assert rows[l4.uuid]["gpu_util_pct"] == 87


def test_clocks_event_reasons_bitmask() -> None:
    reasons = pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwSlowdown
    row = NvmlSensor(FakeNvml([h100(0, clocks_event_reasons=reasons)])).read()[0]
    assert row.clocks_event_reasons == 0x4 | 0x8


def test_pcie_read_round_robin_at_most_once_per_interval() -> None:
    clock = Clock()
    fake = FakeNvml([h100(0), h100(1), h100(2)])
    sensor = NvmlSensor(fake, pcie_interval_s=1.0, clock=clock)
    seen = []
    for _ in range(4):
        rows = as_json(sensor.read())
        seen.append([r["device"] for r in rows if "pcie_tx_kbs" in r])
        clock.advance(0.1)
    assert seen == [[h100(0).uuid], [h100(1).uuid], [h100(2).uuid], []]
    clock.advance(1.0)
    assert [r["device"] for r in as_json(sensor.read()) if "pcie_rx_kbs" in r] == [h100(0).uuid]
    assert fake.fake_count("nvmlDeviceGetPcieThroughput") == 8


def test_init_failure_and_no_gpu() -> None:
    with pytest.raises(SensorError, match="nvmlInit failed: NVML Shared Library Not Found"):
        NvmlSensor(FakeNvml([h100(0)], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    empty = FakeNvml([])
    with pytest.raises(SensorError, match="no GPU"):
        NvmlSensor(empty)
    assert empty.fake_init_count == 0  # shut down again


def test_close_shuts_nvml_down_once() -> None:
    fake = FakeNvml([h100(0)])
    sensor = NvmlSensor(fake)
    assert fake.fake_init_count == 1
    sensor.close()
    sensor.close()
    assert fake.fake_init_count == 0 and fake.fake_count("nvmlShutdown") == 1


@pytest.mark.gpu
def test_nvml_on_a_real_gpu() -> None:
    sensor = NvmlSensor()  # on a GPU machine a failure here is a real failure
    try:
        devices = {key: info.to_json() for key, info in sensor.devices().items()}
        json.dumps(devices)
        assert devices and all(k.startswith("GPU-") for k in devices)
        for row in as_json(sensor.read()):
            json.dumps(row)
            assert row["power_w"] > 0 and row["power_source"] in ("nvml_instant", "nvml_average")
            assert row.get("energy_j", 1.0) > 0
            assert 0 < row["memory_used_bytes"] <= row["memory_total_bytes"]
        for row in as_json(sensor.read_power()):
            assert row["kind"] == "gpu_power" and row["power_w"] > 0
    finally:
        sensor.close()


# -- factory -------------------------------------------------------------------------------


def names(sensors: Sequence[Any]) -> list[str]:
    result = [s.name for s in sensors]
    for sensor in sensors:
        sensor.close()
    return result


def test_auto_opens_host_and_nvml(tmp_path: Path) -> None:
    root = str(make_root(tmp_path, None))
    fake = FakeNvml([h100(0), h100(1)])
    assert names(make_sensors("auto", nvml=fake, root=root, ipmi_runner=no_ipmi)) == [
        "host",
        "nvml",
    ]
    assert fake.fake_init_count == 0


@pytest.mark.parametrize(
    "fake",
    [FakeNvml([h100(0)], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED), FakeNvml([])],
    ids=["driver-not-loaded", "no-gpu"],
)
def test_auto_without_nvml_is_host_only(tmp_path: Path, fake: FakeNvml) -> None:
    root = str(make_root(tmp_path, None))
    assert names(make_sensors(nvml=fake, root=root, ipmi_runner=no_ipmi)) == ["host"]


def test_explicit_kinds(tmp_path: Path) -> None:
    root = str(make_root(tmp_path, None))
    fake = FakeNvml([h100(0)])
    assert names(make_sensors("host", nvml=fake, root=root, ipmi_runner=no_ipmi)) == ["host"]
    assert fake.fake_count("nvmlInit") == 0
    assert names(make_sensors("nvml", nvml=fake, root=root)) == ["nvml"]
    both = make_sensors(" nvml, host ", nvml=fake, root=root, ipmi_runner=no_ipmi)
    assert names(both) == ["host", "nvml"]


def test_explicit_nvml_that_cannot_work_is_an_error(tmp_path: Path) -> None:
    fake = FakeNvml([h100(0)], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(SensorError, match="nvmlInit failed: Driver Not Loaded"):
        make_sensors("host,nvml", nvml=fake, root=str(make_root(tmp_path, None)))


@pytest.mark.parametrize("kinds", ["gpu", "", "auto,host", "host,,rapl"])
def test_invalid_kinds(kinds: str) -> None:
    with pytest.raises(SensorError) as caught:
        parse_kinds(kinds)
    message = str(caught.value)
    assert repr(kinds) in message and "auto" in message and "host, nvml" in message


def test_describe_available(tmp_path: Path) -> None:
    root = str(make_root(tmp_path, None))
    fake = FakeNvml([h100(0), h100(1)])
    found = describe_available(nvml=fake, root=root, ipmi_runner=no_ipmi)
    assert found["host"].available and "model" in found["host"].reason
    assert str(found["nvml"]) == "available: 2 GPU(s): NVIDIA H100 80GB HBM3"
    assert fake.fake_init_count == 0
    broken = FakeNvml([h100(0)], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    found = describe_available(nvml=broken, root=root, ipmi_runner=no_ipmi)
    assert not found["nvml"].available
    assert str(found["nvml"]).startswith("unavailable: nvml: nvmlInit failed")


def test_auto_on_this_machine() -> None:
    sensors = make_sensors()
    assert names(sensors)[0] == "host"
    found = describe_available()
    assert found["host"].available
    assert found["nvml"].available == any(s.name == "nvml" for s in sensors)
    if not os.path.exists("/dev/nvidiactl"):
        assert not found["nvml"].available
