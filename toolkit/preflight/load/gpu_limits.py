"""The thresholds a node's GPU load tests are graded against.

Each limit has a reference: the model's measured value where the hardware table
cites one (a GEMM, a device copy, a host copy, an NVLink copy), else its peak times
the table's efficiency for that metric. A result below ``fail_below x reference``
fails, below ``warn_below x reference`` warns. Explicit CLI thresholds (``Floors``)
override: a floor is the fail limit, and nothing above it fails.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.preflight.hardware_table import Cited, GpuSpec, HardwareTable
from toolkit.rundir.preflight import Status


@dataclass(frozen=True)
class Limit:
    """Where one measurement starts to warn and to fail.

    Attributes:
        warn_below: Below this it warns.
        fail_below: Below this it fails (never above ``warn_below``).
        basis: How the limit was set, shown as the check's threshold.
    """

    warn_below: float
    fail_below: float
    basis: str

    def grade(self, value: float) -> Status:
        """pass, warn or fail for a measured ``value``."""
        if value < self.fail_below:
            return "fail"
        return "warn" if value < self.warn_below else "pass"

    def describe(self, unit: str) -> str:
        """``>= 675 TFLOPS (0.85 x 794.5 measured, h100-sxm)``."""
        return f">= {self.warn_below:.4g} {unit} ({self.basis})"


@dataclass(frozen=True)
class Floors:
    """Explicit thresholds from the command line; None: not given.

    Attributes:
        gemm_tflops: Fail a GPU whose GEMM reaches less.
        memory_gb_s: Fail a GPU whose device-memory copy reaches less.
        host_device_gb_s: Fail a GPU whose host<->device copy reaches less.
        nvlink_gb_s: Fail a GPU pair whose NVLink copy reaches less.
    """

    gemm_tflops: float | None = None
    memory_gb_s: float | None = None
    host_device_gb_s: float | None = None
    nvlink_gb_s: float | None = None


@dataclass(frozen=True)
class GpuLimits:
    """Every limit for one GPU model; None: neither the table nor the CLI sets one.

    Attributes:
        model: The table's key for the model, or None when it is not in the table.
        precision: The GEMM's precision (``bf16``...).
        gemm_tflops: The GEMM's TFLOPS.
        memory_gb_s: A device-memory copy, GB/s.
        host_device_gb_s: A host-to-device or device-to-host copy, GB/s.
        nvlink_gb_s: A device-to-device copy over NVLink, per direction, GB/s.
        tdp_w: The model's TDP: a GPU drawing it under load is power-capped.
        boost_clock_mhz: The SM clock the peak TFLOPS are computed at.
    """

    model: str | None
    precision: str
    gemm_tflops: Limit | None = None
    memory_gb_s: Limit | None = None
    host_device_gb_s: Limit | None = None
    nvlink_gb_s: Limit | None = None
    tdp_w: float | None = None
    boost_clock_mhz: float | None = None


def gpu_limits(
    table: HardwareTable,
    spec: GpuSpec | None,
    precision: str = "bf16",
    floors: Floors = Floors(),
) -> GpuLimits:
    """The limits for ``spec`` (None: a model the table does not know) and the CLI's floors."""
    if spec is None:
        return GpuLimits(
            model=None,
            precision=precision,
            gemm_tflops=_floor_only(floors.gemm_tflops),
            memory_gb_s=_floor_only(floors.memory_gb_s),
            host_device_gb_s=_floor_only(floors.host_device_gb_s),
            nvlink_gb_s=_floor_only(floors.nvlink_gb_s),
        )
    gemm = _reference(
        spec.measured_tflops.get(precision),
        spec.peak_tflops.get(precision),
        table.efficiency.get(f"gemm_{precision}"),
    )
    memory = _reference(spec.measured_memory_gb_s, spec.memory_gb_s, table.efficiency.get("memory"))
    nvlink = _reference(
        spec.measured_nvlink_gb_s, spec.nvlink_unidir_gb_s, table.efficiency.get("nvlink")
    )
    host = _reference(
        spec.measured_host_device_gb_s, _pcie_peak(table, spec), table.efficiency.get("host_device")
    )

    def limit(reference: tuple[float, str] | None, floor: float | None) -> Limit | None:
        derived = None
        if reference is not None:
            value, how = reference
            derived = Limit(
                table.warn_below * value,
                table.fail_below * value,
                f"{table.warn_below:g} x {how}, {spec.key}",
            )
        return _with_floor(derived, floor)

    return GpuLimits(
        model=spec.key,
        precision=precision,
        gemm_tflops=limit(gemm, floors.gemm_tflops),
        memory_gb_s=limit(memory, floors.memory_gb_s),
        host_device_gb_s=limit(host, floors.host_device_gb_s),
        nvlink_gb_s=limit(nvlink, floors.nvlink_gb_s),
        tdp_w=spec.tdp_w.value if spec.tdp_w else None,
        boost_clock_mhz=spec.boost_clock_mhz.value if spec.boost_clock_mhz else None,
    )


def _reference(
    measured: Cited | None, peak: Cited | None, efficiency: Cited | None
) -> tuple[float, str] | None:
    """The value limits are fractions of, and how it was found."""
    if measured is not None:
        return measured.value, f"{measured.value:g} measured"
    if peak is not None and efficiency is not None:
        return (
            peak.value * efficiency.value,
            f"{peak.value:g} peak x {efficiency.value:g} typical efficiency",
        )
    return None


def _pcie_peak(table: HardwareTable, spec: GpuSpec) -> Cited | None:
    """The model's PCIe link per direction, in theory."""
    if spec.pcie_gen is None:
        return None
    x16 = table.pcie_x16_unidir_gb_s.get(int(spec.pcie_gen.value))
    if x16 is None:
        return None
    width = spec.pcie_width.value if spec.pcie_width else 16.0
    return Cited(x16.value * width / 16, x16.sources)


def _floor_only(floor: float | None) -> Limit | None:
    return None if floor is None else Limit(floor, floor, "set on the command line")


def _with_floor(derived: Limit | None, floor: float | None) -> Limit | None:
    if floor is None:
        return derived
    if derived is None:
        return _floor_only(floor)
    return Limit(
        max(derived.warn_below, floor),
        floor,
        f"fail set on the command line; warn {derived.basis}",
    )
