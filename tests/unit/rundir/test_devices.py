"""The manifest's device entries (toolkit/rundir/devices.py): written as the sensors wrote them."""

from __future__ import annotations

import json

from toolkit.rundir.devices import GpuInfo, HostInfo, PowerModel, RaplDomain, device_info

GPU_JSON = {
    "kind": "gpu",
    "uuid": "GPU-1",
    "nvml_index": 1,
    "name": "NVIDIA H100 80GB HBM3",
    "serial": "1654923000001",
    "memory_total_bytes": 80 * 1024**3,
    "power_limit_w": 700.0,
    "pci_bus_id": "00000000:19:00.0",
    "mig_mode": "enabled",
    "mig_devices": ["MIG-a", "MIG-b"],
    "unsupported": ["utilization"],
}
HOST_JSON = {
    "kind": "host",
    "cpus": 2,
    "model": {"idle_w_per_cpu": 2.0, "busy_w_per_cpu": 8.0, "note": "an estimate"},
    "power_source": "model",
    "power_source_reason": "no RAPL: no /sys/class/powercap",
    "energy_source": "model",
    "rapl_domains": [],
    "rapl_reason": "no /sys/class/powercap",
    "ipmi_reason": "ipmitool not on PATH",
    "memory_total_bytes": 8 * 1024**3,
}


def test_entries_read_back_to_the_same_json_in_the_same_order() -> None:
    for key, written in (("GPU-1", GPU_JSON), ("host", HOST_JSON)):
        info = device_info(key, json.loads(json.dumps(written)))
        assert list(info.to_json().items()) == list(written.items())
    gpu = device_info("GPU-1", GPU_JSON)
    assert isinstance(gpu, GpuInfo) and gpu.kind == "gpu"
    assert gpu.nvml_index == 1 and gpu.mig_devices == ("MIG-a", "MIG-b")
    host = device_info("host", HOST_JSON)
    assert isinstance(host, HostInfo) and host.kind == "host"
    assert host.model == PowerModel(2.0, 8.0, "an estimate")


def test_what_a_gpu_did_not_report_is_left_out_and_the_hosts_sources_are_always_there() -> None:
    assert GpuInfo(uuid="GPU-1", nvml_index=0).to_json() == {
        "kind": "gpu",
        "uuid": "GPU-1",
        "nvml_index": 0,
    }
    host = HostInfo(rapl_domains=(RaplDomain("intel-rapl:0", "package", "package-0"),))
    assert host.to_json() == {
        "kind": "host",
        "power_source": None,
        "energy_source": None,
        "rapl_domains": [{"zone": "intel-rapl:0", "domain": "package", "name": "package-0"}],
    }


def test_reading_is_lenient_a_wrong_field_reads_as_not_reported() -> None:
    gpu = device_info("GPU-2", {"name": 7, "nvml_index": True, "power_limit_w": "high"})
    assert gpu == GpuInfo()  # no kind: the key says GPU; every field wrong
    host = device_info("host", {"cpus": "2", "rapl_domains": [{"zone": 1}, "x"], "model": {}})
    assert host == HostInfo()
    assert device_info("x", None) == GpuInfo()
    assert isinstance(device_info("GPU-3", {"kind": "host"}), HostInfo)  # the kind decides
