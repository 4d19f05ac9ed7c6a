"""GPU preflight: gpu_facts on the fake NVML (and the real one on a GPU machine), grading."""

from __future__ import annotations

import sys
import time
from typing import Any

import pynvml
import pytest
from fake_nvml import FakeGpu, FakeNvml

from toolkit.node import facts as facts_module
from toolkit.node.facts import gpu_facts
from toolkit.nodeinfo.gpu_facts import GpuFacts
from toolkit.preflight.gpu_checks import (
    CLOCKS_EVENT_REASONS,
    clocks_event_names,
    driver_checks,
    gpu_checks,
)
from toolkit.preflight.result import Check


def gpu(index: int, **kwargs: Any) -> FakeGpu:
    return FakeGpu(uuid=f"GPU-{index:08x}-5d1c-c2cb-6a5e-1a2b3c4d5e6f", **kwargs)


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def typed(facts: dict[str, Any]) -> GpuFacts:
    """What the host reads from a node's ``gpus`` answer (checks take only this)."""
    return GpuFacts.from_json("n1", facts)


def grade(gpus: list[FakeGpu], expected: int | None = None) -> dict[str, Check]:
    facts = typed(gpu_facts(FakeNvml(gpus)))
    return by_name(gpu_checks("n1", facts, len(gpus) if expected is None else expected))


# -- gpu_facts ----------------------------------------------------------------------------


def test_facts_of_healthy_gpus() -> None:
    fake = FakeNvml([gpu(0), gpu(1, mig_capable=False)])
    facts = gpu_facts(fake)
    assert facts["available"] is True
    assert facts["driver_version"] == "550.54.15"
    assert facts["cuda_driver_version"] == "12.4"
    assert facts["count"] == 2
    assert "errors" not in facts
    first = facts["devices"][gpu(0).uuid]
    assert first == {
        "index": 0,
        "pci_bus_id": gpu(0).pci_bus_id,
        "name": "NVIDIA H100 80GB HBM3",
        "persistence_mode": True,
        "mig_enabled": False,
        "ecc_enabled": True,
        "ecc_pending_enabled": True,
        "ecc_volatile_uncorrected": 0,
        "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False},
        "clocks_event_reasons": 0,
        "pcie_gen": 5,
        "pcie_gen_max": 5,
        "pcie_width": 16,
        "pcie_width_max": 16,
        "nvlink_active": [True] * 18,
    }
    # A MIG-less GPU: the MIG mode is left out, the rest is there.
    second = facts["devices"][gpu(1).uuid]
    assert "mig_enabled" not in second and second["index"] == 1
    assert set(first) - set(second) == {"mig_enabled"}
    assert fake.fake_init_count == 0  # nvmlShutdown was called
    assert fake.fake_count("nvmlDeviceGetNvLinkState", gpu(0).uuid) == 19  # 18 links + the end


def test_facts_leave_out_unsupported_and_forbidden_fields() -> None:
    unsupported = {
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetCurrPcieLinkGeneration",
    }
    fake = FakeNvml(
        [gpu(0, unsupported=unsupported, no_permission={"nvmlDeviceGetEccMode"}, ecc_enabled=False)]
    )
    fake.fake_unsupported = {"nvmlSystemGetCudaDriverVersion"}
    facts = gpu_facts(fake)
    assert "cuda_driver_version" not in facts and facts["driver_version"] == "550.54.15"
    device = facts["devices"][gpu(0).uuid]
    for key in (
        "remapped_rows",
        "nvlink_active",
        "persistence_mode",
        "pcie_gen",
        "ecc_enabled",
        "ecc_volatile_uncorrected",
    ):
        assert key not in device, key
    assert device["pcie_width"] == 16 and "errors" not in device
    checks = by_name(gpu_checks("n1", typed(facts), 1))
    assert {"gpu.row_remap", "gpu.nvlink", "gpu.persistence_mode", "gpu.ecc"}.isdisjoint(checks)
    assert checks["gpu.pcie_link"].status == "pass"  # the width alone is still graded


def test_facts_record_other_nvml_errors() -> None:
    fake = FakeNvml([gpu(0, errors={"nvmlDeviceGetTotalEccErrors": pynvml.NVML_ERROR_GPU_IS_LOST})])
    device = gpu_facts(fake)["devices"][gpu(0).uuid]
    assert "ecc_volatile_uncorrected" not in device
    assert "ecc_volatile_uncorrected" in device["errors"]
    check = by_name(gpu_checks("n1", typed(gpu_facts(fake)), 1))["gpu.nvml"]
    assert check.status == "fail" and "GPU 0" in check.measured


def test_facts_strings_as_bytes() -> None:
    facts = gpu_facts(FakeNvml([gpu(0)], strings_as_bytes=True))
    assert facts["driver_version"] == "550.54.15"
    assert facts["devices"][gpu(0).uuid]["name"] == "NVIDIA H100 80GB HBM3"


def test_facts_when_init_fails() -> None:
    facts = gpu_facts(FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert facts["available"] is False and "nvmlInit" in facts["reason"]


def test_facts_without_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise
    facts = gpu_facts()
    assert facts == {"available": False, "reason": facts["reason"]}
    assert "pynvml" in facts["reason"]


def test_facts_on_this_machine_are_quick() -> None:
    began = time.monotonic()
    facts = gpu_facts()
    assert time.monotonic() - began < 5
    assert isinstance(facts["available"], bool)


def test_main_includes_gpus(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(facts_module, "gpu_facts", lambda: {"available": False, "reason": "x"})
    assert facts_module.main(["/tmp"]) == 0
    assert '"gpus": {"available": false, "reason": "x"}' in capsys.readouterr().out


# -- gpu_checks ---------------------------------------------------------------------------


def test_healthy_node_passes_everything() -> None:
    checks = grade([gpu(0), gpu(1)])
    assert set(checks) == {
        "gpu.count",
        "gpu.driver",
        "gpu.ecc",
        "gpu.row_remap",
        "gpu.persistence_mode",
        "gpu.clocks_events",
        "gpu.pcie_link",
        "gpu.nvlink",
    }
    assert {c.status for c in checks.values()} == {"pass"}
    assert gpu(0).uuid in checks["gpu.count"].measured
    assert gpu(1).uuid in checks["gpu.count"].measured
    assert checks["gpu.driver"].measured == "driver 550.54.15, CUDA 12.4"


def test_count_mismatch_fails() -> None:
    check = grade([gpu(0)], expected=8)["gpu.count"]
    assert check.status == "fail" and check.measured.startswith("1 GPU(s)")
    assert "8" in check.threshold


def test_no_gpu_expected_and_none_found_means_no_checks() -> None:
    off = GpuFacts(available=False, reason="no pynvml")
    assert gpu_checks("n1", off, 0) == []
    assert gpu_checks("n1", off, None) == []
    assert gpu_checks("n1", typed(gpu_facts(FakeNvml([]))), None) == []


def test_gpus_expected_but_nvml_unavailable_fails() -> None:
    checks = gpu_checks("n1", GpuFacts(available=False, reason="no pynvml"), 8)
    assert [(c.name, c.status) for c in checks] == [("gpu.count", "fail")]
    assert "no pynvml" in checks[0].measured


def test_gpus_found_but_none_expected_fails_the_count() -> None:
    assert grade([gpu(0)], expected=0)["gpu.count"].status == "fail"


def test_ecc_errors_fail() -> None:
    check = grade([gpu(0), gpu(1, ecc_volatile_uncorrected=3)])["gpu.ecc"]
    assert check.status == "fail"
    assert "GPU 1" in check.measured and gpu(1).uuid in check.measured and ": 3" in check.measured


@pytest.mark.parametrize(
    ("rows", "status", "text"),
    [
        ((0, 0, 1, 0), "fail", "remap pending"),
        ((0, 0, 0, 1), "fail", "remapping failed"),
        ((2, 1, 0, 0), "warn", "1 row(s) remapped"),
        ((5, 0, 0, 0), "pass", "no pending"),
    ],
)
def test_row_remaps(rows: tuple[int, int, int, int], status: str, text: str) -> None:
    check = grade([gpu(0, remapped_rows=rows)])["gpu.row_remap"]
    assert check.status == status and text in check.measured


def test_persistence_off_warns() -> None:
    check = grade([gpu(0, persistence_mode=False)])["gpu.persistence_mode"]
    assert check.status == "warn" and "GPU 0" in check.measured


def test_clocks_events_at_idle() -> None:
    benign = 0x1 | 0x2 | 0x10 | 0x100
    assert grade([gpu(0, clocks_event_reasons=benign)])["gpu.clocks_events"].status == "pass"
    check = grade([gpu(0, clocks_event_reasons=0x1 | 0x4 | 0x40)])["gpu.clocks_events"]
    assert check.status == "warn"
    assert "sw_power_cap, hw_thermal_slowdown" in check.measured
    assert "gpu_idle" not in check.measured


def test_clocks_event_names_match_pynvml() -> None:
    real = {
        "gpu_idle": pynvml.nvmlClocksEventReasonGpuIdle,
        "applications_clocks": pynvml.nvmlClocksEventReasonApplicationsClocksSetting,
        "sw_power_cap": pynvml.nvmlClocksEventReasonSwPowerCap,
        "hw_slowdown": pynvml.nvmlClocksEventReasonHwSlowdown,
        "sync_boost": pynvml.nvmlClocksEventReasonSyncBoost,
        "sw_thermal_slowdown": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
        "hw_thermal_slowdown": pynvml.nvmlClocksEventReasonHwThermalSlowdown,
        "hw_power_brake_slowdown": pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
        "display_clocks": pynvml.nvmlClocksEventReasonDisplayClockSetting,
    }
    assert {v: k for k, v in real.items()} == CLOCKS_EVENT_REASONS
    assert clocks_event_names(0x8 | 0x1000) == ["hw_slowdown", "0x1000"]


def test_downtrained_pcie_warns_and_mentions_idle() -> None:
    check = grade([gpu(0, pcie_gen=1), gpu(1, pcie_width=8)])["gpu.pcie_link"]
    assert check.status == "warn"
    assert "GPU 0" in check.measured and "Gen1 of Gen5" in check.measured
    assert "GPU 1" in check.measured and "x8 of x16" in check.measured
    assert "idle" in check.hint


def test_inactive_nvlink_fails() -> None:
    links = [True] * 18
    links[5] = False
    check = grade([gpu(0), gpu(1, nvlink_active=links)])["gpu.nvlink"]
    assert check.status == "fail" and "GPU 1" in check.measured and "link(s) 5" in check.measured


def test_gpu_without_nvlink_has_no_nvlink_check() -> None:
    checks = grade([gpu(0, nvlink_active=[]), gpu(1, unsupported={"nvmlDeviceGetNvLinkState"})])
    assert "gpu.nvlink" not in checks


def test_driver_mismatch_fails_the_odd_node() -> None:
    def node(driver: str | None) -> GpuFacts:
        fake = FakeNvml([gpu(0)] if driver else [])
        if driver:
            fake.fake_driver_version = driver
        else:
            fake.fake_init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
        return typed(gpu_facts(fake))

    facts = {
        "a": node("550.54.15"),
        "b": node("550.54.15"),
        "c": node("535.161.08"),
        "cpu": node(None),
    }
    checks = {c.scope: c for c in driver_checks(facts)}
    assert set(checks) == {"a", "b", "c"}  # a node without GPUs is not compared
    assert checks["a"].status == checks["b"].status == "pass"
    assert checks["c"].status == "fail" and "550.54.15" in checks["c"].threshold
    assert driver_checks({"cpu": node(None), "x": GpuFacts()}) == []


# -- the real NVML ------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_facts_with_the_real_library() -> None:
    facts = gpu_facts()
    assert facts["available"] is True, facts.get("reason")
    assert facts["count"] >= 1 and len(facts["devices"]) == facts["count"]
    assert facts["driver_version"].count(".") >= 1
    major, minor = (int(x) for x in facts["cuda_driver_version"].split("."))
    assert major >= 11 and 0 <= minor < 100
    indices = sorted(d["index"] for d in facts["devices"].values())
    assert indices == list(range(facts["count"]))
    for uuid, device in facts["devices"].items():
        assert uuid.startswith("GPU-"), uuid
        assert device["name"]
        assert "errors" not in device, device["errors"]
        if "pcie_gen" in device and "pcie_gen_max" in device:
            assert 1 <= device["pcie_gen"] <= device["pcie_gen_max"] <= 7
        if "pcie_width" in device and "pcie_width_max" in device:
            assert 1 <= device["pcie_width"] <= device["pcie_width_max"] <= 32
        assert len(device.get("nvlink_active", [])) <= pynvml.NVML_NVLINK_MAX_LINKS
    checks = gpu_checks("here", GpuFacts.from_json("here", facts), facts["count"])
    assert by_name(checks)["gpu.count"].status == "pass"
