"""Grading the per-node load tests: peers of the same hardware, model limits, throttling."""

from __future__ import annotations

import time

import pytest
from fake_nvml import FakeGpu, FakeNvml

from toolkit.preflight.hardware import load_hardware
from toolkit.preflight.load.device_checks import PeerFractions, load_checks, throttle_check
from toolkit.preflight.load.gpu_limits import gpu_limits
from toolkit.preflight.load.node import DeviceLoad, NodeLoad, NvmlSampler, Spread
from toolkit.rundir.preflight import Check

H100 = "NVIDIA H100 80GB HBM3"


def gpu(
    gemm_tflops: float,
    *,
    device: str = "cuda:0",
    model: str = H100,
    h2d_gb_s: float | None = 54.0,
    memory_gb_s: float = 2900.0,
    samples: int = 20,
    clocks_events: dict[int, int] | None = None,
) -> DeviceLoad:
    return DeviceLoad(
        device=device,
        model=model,
        precision="bf16",
        gemm_tflops=gemm_tflops,
        memory_gb_s=memory_gb_s,
        h2d_gb_s=h2d_gb_s,
        d2h_gb_s=h2d_gb_s,
        samples=samples,
        sm_clock_mhz=Spread(1755.0, 1980.0, 1980.0) if samples else None,
        power_w=Spread(420.0, 690.0, 700.0) if samples else None,
        clocks_events=clocks_events or {},
    )


def node(name: str, *devices: DeviceLoad, skipped: str = "") -> NodeLoad:
    return NodeLoad(name, "bf16", 2.0, 8192, devices, skipped)


def by(checks: list[Check], name: str) -> dict[str, Check]:
    return {c.scope: c for c in checks if c.name == name}


SIX = {"n1": 800.0, "n2": 810.0, "n3": 790.0, "n4": 805.0, "n5": 400.0, "n6": 600.0}


def test_the_slow_nodes_among_six_are_named_against_the_median() -> None:
    checks = load_checks({n: node(n, gpu(v)) for n, v in SIX.items()})
    gemm = by(checks, "load.gemm")
    assert {n: c.status for n, c in gemm.items()} == {
        "n1": "pass",
        "n2": "pass",
        "n3": "pass",
        "n4": "pass",
        "n5": "fail",
        "n6": "warn",
    }
    median = 795.0  # of 400, 600, 790, 800, 805, 810
    assert (
        gemm["n5"].measured
        == f"cuda:0 fail: 400 TFLOP/s (50% of the median {median:g} of 6 {H100})"
    )
    assert "75% of the median 795" in gemm["n6"].measured
    assert gemm["n5"].threshold == ">= 80% of the median of the same hardware"
    assert gemm["n5"].hint and not gemm["n1"].hint
    assert gemm["n1"].measured == f"800 TFLOP/s on 1 device(s) (median 795 of 6 {H100})"
    # The other metrics were alike everywhere.
    for name in ("load.h2d", "load.d2h", "load.membw", "load.throttle"):
        assert {c.status for c in by(checks, name).values()} == {"pass"}, name


def test_one_slow_gpu_of_eight_is_named_on_its_node() -> None:
    loads = {
        f"n{i}": node(
            f"n{i}",
            *(gpu(300.0 if (i, g) == (2, 5) else 790.0 + g, device=f"cuda:{g}") for g in range(8)),
        )
        for i in range(3)
    }
    gemm = by(load_checks(loads), "load.gemm")
    assert gemm["n2"].status == "fail"
    assert gemm["n2"].measured.startswith("cuda:5 fail: 300 TFLOP/s")
    assert gemm["n0"].status == gemm["n1"].status == "pass"
    assert "790-797 TFLOP/s on 8 device(s)" in gemm["n0"].measured


def test_peers_are_the_same_hardware_only() -> None:
    loads = {n: node(n, gpu(v)) for n, v in SIX.items() if n not in ("n5", "n6")}
    loads["a1"] = node("a1", gpu(250.0, model="NVIDIA A100-SXM4-80GB"))
    gemm = by(load_checks(loads), "load.gemm")
    assert gemm["a1"].status == "pass"  # no peer, no limit: recorded
    assert gemm["a1"].measured == "250 TFLOP/s on 1 device(s)"


def test_fractions_can_be_set() -> None:
    loads = {n: node(n, gpu(v)) for n, v in SIX.items()}
    gemm = by(load_checks(loads, peers=PeerFractions(warn_below=0.9, fail_below=0.4)), "load.gemm")
    assert gemm["n5"].status == "warn" and gemm["n6"].status == "warn"


def test_a_uniformly_slow_cluster_fails_the_models_limit() -> None:
    table = load_hardware()
    limits = {H100: gpu_limits(table, table.gpu("h100-sxm"), "bf16")}
    gemm_limit = limits[H100].gemm_tflops
    assert gemm_limit is not None
    slow = gemm_limit.fail_below * 0.9
    loads = {n: node(n, gpu(slow)) for n in ("n1", "n2", "n3")}
    gemm = by(load_checks(loads, limits), "load.gemm")
    assert {c.status for c in gemm.values()} == {"fail"}
    assert "100% of the median" in gemm["n1"].measured
    assert gemm_limit.describe("TFLOP/s") in gemm["n1"].threshold
    # Between the warn and the fail limit it warns, even though the peers agree.
    middle = (gemm_limit.fail_below + gemm_limit.warn_below) / 2
    loads = {n: node(n, gpu(middle)) for n in ("n1", "n2", "n3")}
    assert {c.status for c in by(load_checks(loads, limits), "load.gemm").values()} == {"warn"}


def test_a_cpu_only_cluster_has_no_host_copy_or_throttle_checks() -> None:
    cpu = DeviceLoad("cpu", "AMD EPYC (2 threads)", "fp32", 0.18, 34.0, host_copy_skipped="no GPU")
    loads = {n: node(n, cpu, skipped="no GPU") for n in ("n1", "n2")}
    slow = DeviceLoad("cpu", "AMD EPYC (2 threads)", "fp32", 0.08, 33.0, host_copy_skipped="no GPU")
    loads["n3"] = node("n3", slow, skipped="no GPU")
    checks = load_checks(loads)
    assert {c.name for c in checks} == {"load.gemm", "load.membw"}
    assert by(checks, "load.gemm")["n3"].status == "fail"
    assert (
        "44% of the median 0.18 of 3 AMD EPYC (2 threads)" in by(checks, "load.gemm")["n3"].measured
    )
    assert by(checks, "load.membw")["n3"].status == "pass"


def test_throttle_reasons_are_named_with_how_often() -> None:
    braked = gpu(800.0, device="cuda:1", clocks_events={0x80: 8, 0x4: 20, 0x1: 2})
    capped = gpu(800.0, device="cuda:2", clocks_events={0x4: 5})
    idle = gpu(800.0, device="cuda:3", clocks_events={0x1: 20, 0x10: 20})
    check = throttle_check("n1", node("n1", gpu(800.0), braked, capped, idle))
    assert check is not None and check.status == "fail"
    assert check.measured == (
        "cuda:1 fail: sw_power_cap in 100%, hw_power_brake in 40% of 20 samples; "
        "SM clock 1755-1980 MHz, power 420-700 W; "
        "cuda:2 warn: sw_power_cap in 25% of 20 samples; SM clock 1755-1980 MHz, power 420-700 W"
    )
    warn = throttle_check("n2", node("n2", capped, idle))
    assert warn is not None and warn.status == "warn" and warn.hint
    ok = throttle_check("n3", node("n3", idle))
    assert ok is not None and ok.status == "pass"
    assert (
        ok.measured
        == "no throttling in 20 samples on 1 GPU(s); SM clock 1755-1980 MHz, power 420-700 W"
    )


def test_a_gpu_node_nvml_could_not_read_warns() -> None:
    load = node("n1", gpu(800.0, samples=0), skipped="pynvml (nvidia-ml-py) does not import")
    check = throttle_check("n1", load)
    assert check is not None and check.status == "warn"
    assert check.measured == "not read during the load: pynvml (nvidia-ml-py) does not import"


def test_a_power_brake_seen_by_the_sampler_fails_the_node() -> None:
    fakes = [FakeGpu(uuid=f"GPU-{i}") for i in range(2)]
    fake = FakeNvml(fakes)
    fake.nvmlInit()
    handles = [fake.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
    with NvmlSampler(fake, handles, interval_s=0.01) as sampler:
        time.sleep(0.1)
        fakes[1].clocks_event_reasons = 0x80  # GPU 1 brakes halfway through the load
        fakes[1].sm_clock_mhz = 1100
        time.sleep(0.1)
    devices = []
    for i in range(2):
        samples, clock, power, events = sampler.results(i)
        devices.append(
            DeviceLoad(
                f"cuda:{i}",
                H100,
                "bf16",
                790.0,
                2900.0,
                54.0,
                53.0,
                "",
                samples,
                clock,
                power,
                events,
            )
        )
    check = throttle_check("n1", node("n1", *devices))
    assert check is not None and check.status == "fail"
    assert check.measured.startswith("cuda:1 fail: hw_power_brake in ")
    assert "SM clock 1100-1980 MHz" in check.measured and "cuda:0" not in check.measured


@pytest.mark.parametrize(
    "bit, status", [(0x8, "fail"), (0x40, "fail"), (0x20, "warn"), (0x2, "pass")]
)
def test_which_reasons_fail_warn_or_pass(bit: int, status: str) -> None:
    check = throttle_check("n1", node("n1", gpu(800.0, clocks_events={bit: 3})))
    assert check is not None and check.status == status
