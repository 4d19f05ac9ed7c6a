"""GPU limits from the hardware table and the CLI's floors."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.preflight.hardware import load_hardware
from toolkit.preflight.hardware_table import HardwareTable
from toolkit.preflight.load.gpu_limits import Floors, Limit, gpu_limits


@pytest.fixture(scope="module")
def table() -> HardwareTable:
    return load_hardware()


def test_a_measured_reference_is_used_where_cited(table: HardwareTable) -> None:
    limits = gpu_limits(table, table.gpu("h100-sxm"), "bf16")
    assert limits.model == "h100-sxm" and limits.precision == "bf16"
    gemm = limits.gemm_tflops
    assert gemm is not None
    assert gemm.warn_below == pytest.approx(0.85 * 794.5)
    assert gemm.fail_below == pytest.approx(0.75 * 794.5)
    assert gemm.basis == "0.85 x 794.5 measured, h100-sxm"
    assert limits.tdp_w == 700 and limits.boost_clock_mhz == 1830


def test_peak_times_efficiency_without_a_measurement(table: HardwareTable) -> None:
    gemm = gpu_limits(table, table.gpu("h100-pcie"), "bf16").gemm_tflops
    assert gemm is not None
    assert gemm.fail_below == pytest.approx(0.75 * 756 * 0.803)
    assert "756 peak x 0.803 typical efficiency" in gemm.basis


# DCGM's own minimum_bandwidth per SKU (nvvs/diag-skus.yaml.in, MB/s): 0.75 x its
# measurement. The table cites the measurements, so its fail limits must land on them.
DCGM_MINIMUM_GB_S = {
    "h100-sxm": 1905.0,
    "h100-nvl": 2043.0,
    "h200-sxm": 2333.0,
    "a100-sxm-80gb": 1173.0,
    "a100-pcie-80gb": 1121.25,
    "a100-pcie-40gb": 969.75,
    "l40s": 525.0,
}


@pytest.mark.parametrize(("key", "minimum"), sorted(DCGM_MINIMUM_GB_S.items()))
def test_memory_fail_limits_match_dcgms_minimums(
    table: HardwareTable, key: str, minimum: float
) -> None:
    memory = gpu_limits(table, table.gpu(key)).memory_gb_s
    assert memory is not None
    assert memory.fail_below == pytest.approx(minimum, rel=2e-3)


def test_host_device_follows_the_pcie_link(table: HardwareTable) -> None:
    h200 = gpu_limits(table, table.gpu("h200-sxm")).host_device_gb_s
    assert h200 is not None and h200.fail_below == pytest.approx(0.75 * 55.43)  # measured
    a100 = gpu_limits(table, table.gpu("a100-sxm-80gb")).host_device_gb_s
    assert a100 is not None and a100.fail_below == pytest.approx(0.75 * 31 * 0.874)  # Gen4 x16
    h100 = gpu_limits(table, table.gpu("h100-sxm")).host_device_gb_s
    assert h100 is not None and h100.fail_below == pytest.approx(0.75 * 63 * 0.874)  # Gen5 x16


def test_a_narrower_link_scales_the_host_limit(tmp_path: Path) -> None:
    path = tmp_path / "hw.yaml"
    path.write_text("gpus:\n  narrow:\n    pcie_gen: 4\n    pcie_width: 8\n")
    table = load_hardware(path)
    limit = gpu_limits(table, table.gpu("narrow")).host_device_gb_s
    assert limit is not None and limit.fail_below == pytest.approx(0.75 * 31 / 2 * 0.874)


def test_nvlink_only_where_the_model_has_it(table: HardwareTable) -> None:
    assert gpu_limits(table, table.gpu("l40s")).nvlink_gb_s is None
    h200 = gpu_limits(table, table.gpu("h200-sxm")).nvlink_gb_s
    assert h200 is not None and h200.warn_below == pytest.approx(0.85 * 396.40)
    a100 = gpu_limits(table, table.gpu("a100-sxm-80gb")).nvlink_gb_s
    assert a100 is not None and a100.fail_below == pytest.approx(0.75 * 300 * 0.88)


def test_a_precision_without_figures_sets_no_gemm_limit(table: HardwareTable) -> None:
    # A100 has no fp8, and the table has no tf32 efficiency.
    assert gpu_limits(table, table.gpu("a100-sxm-80gb"), "fp8").gemm_tflops is None
    assert gpu_limits(table, table.gpu("h100-sxm"), "tf32").gemm_tflops is None
    fp32 = gpu_limits(table, table.gpu("h100-sxm"), "fp32").gemm_tflops
    assert fp32 is not None and fp32.fail_below == pytest.approx(0.75 * 39.0)


def test_a_floor_is_the_fail_limit(table: HardwareTable) -> None:
    spec = table.gpu("h100-sxm")
    low = gpu_limits(table, spec, floors=Floors(gemm_tflops=500.0)).gemm_tflops
    assert low is not None
    assert (low.fail_below, low.warn_below) == (500.0, pytest.approx(0.85 * 794.5))
    assert low.basis.startswith("fail set on the command line; warn 0.85 x 794.5 measured")
    high = gpu_limits(table, spec, floors=Floors(gemm_tflops=750.0)).gemm_tflops
    assert high is not None and (high.fail_below, high.warn_below) == (750.0, 750.0)


def test_an_unknown_model_has_only_the_floors(table: HardwareTable) -> None:
    limits = gpu_limits(table, None, "bf16", Floors(memory_gb_s=1000.0))
    assert limits.model is None
    assert limits.gemm_tflops is None and limits.nvlink_gb_s is None
    assert limits.memory_gb_s == Limit(1000.0, 1000.0, "set on the command line")
    assert limits.tdp_w is None


@pytest.mark.parametrize(
    ("value", "status"),
    [(10.0, "pass"), (8.5, "pass"), (8.4, "warn"), (7.5, "warn"), (7.4, "fail")],
)
def test_grading(value: float, status: str) -> None:
    limit = Limit(8.5, 7.5, "test")
    assert limit.grade(value) == status
    assert limit.describe("GB/s") == ">= 8.5 GB/s (test)"
