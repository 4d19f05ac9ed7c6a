"""The per-node load test, run for real on this machine's CPU, and its NVML sampler."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from conftest import REPO
from fake_nvml import FakeGpu, FakeNvml

from toolkit.errors import PreflightError, RunDirError
from toolkit.preflight.load import node
from toolkit.preflight.load.device_checks import load_checks
from toolkit.preflight.load.node import (
    DeviceLoad,
    NodeLoad,
    NvmlSampler,
    Spread,
    gemm_tflops,
    run_node_load,
)


@pytest.fixture(scope="module")
def cpu_load() -> NodeLoad:
    return run_node_load("bf16", duration_s=0.3)


def test_a_cpu_node_measures_one_fp32_gemm_and_a_memory_copy(cpu_load: NodeLoad) -> None:
    assert cpu_load.precision == "bf16" and cpu_load.duration_s == 0.3
    assert cpu_load.gemm_size == 1024
    assert cpu_load.sampling_skipped == "no GPU"
    (cpu,) = cpu_load.devices
    assert cpu.device == "cpu" and cpu.precision == "fp32"
    assert cpu.model.endswith(" threads)")
    # Any CPU of this decade multiplies faster than 1 GFLOP/s and copies faster than 0.5 GB/s;
    # none reaches 100 TFLOP/s or 10 TB/s.
    assert 1e-3 < cpu.gemm_tflops < 100
    assert 0.5 < cpu.memory_gb_s < 10_000
    assert cpu.h2d_gb_s is None and cpu.d2h_gb_s is None
    assert "no GPU" in cpu.host_copy_skipped
    assert cpu.samples == 0 and cpu.sm_clock_mhz is None and cpu.clocks_events == {}


class TimedProducts:
    """A torch for ``gemm_tflops`` whose every product takes ``product_s`` on its clock.

    It stands in for both torch and the module's ``time``: the clock moves only as
    products are made, as a product taking that long in wall time would move it.
    """

    def __init__(self, product_s: float) -> None:
        self.product_s = product_s
        self.now_s = 0.0
        self.products = 0

    def perf_counter(self) -> float:
        return self.now_s

    def randn(self, *shape: int, device: object, dtype: object) -> object:
        return object()

    def matmul(self, a: object, b: object, out: object = None) -> object:
        self.products += 1
        self.now_s += self.product_s
        return out


CPU = SimpleNamespace(type="cpu")


def timed_gemm(
    monkeypatch: pytest.MonkeyPatch, product_s: float, duration_s: float
) -> tuple[float, TimedProducts]:
    """``gemm_tflops`` of 256-square products on ``TimedProducts``: (TFLOP/s, the fake)."""
    products = TimedProducts(product_s)
    monkeypatch.setattr(node, "time", products)
    return gemm_tflops(products, CPU, "fp32", 256, duration_s), products


def test_the_gemm_runs_for_its_duration_on_the_clock_it_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Products in batches until ``duration_s`` has passed, never a batch past it.

    On the test's clock; how long a real run takes is a benchmark
    (``benchmarks/timing_targets.py gemm``).
    """
    tflops, products = timed_gemm(monkeypatch, product_s=0.003, duration_s=0.5)
    timed_s = products.now_s - 0.003  # the first product warms up, untimed
    assert 0.5 <= timed_s < 0.5 + 2 * 0.003
    assert tflops == pytest.approx(2 * 256**3 / 0.003 / 1e12, rel=1e-9)


def test_json_round_trip(cpu_load: NodeLoad) -> None:
    text = json.dumps(cpu_load.to_json())
    assert NodeLoad.from_json(json.loads(text)) == cpu_load


def test_json_round_trip_with_nvml_samples() -> None:
    gpu = DeviceLoad(
        device="cuda:1",
        model="NVIDIA H100 80GB HBM3",
        precision="bf16",
        gemm_tflops=780.5,
        memory_gb_s=2900.0,
        h2d_gb_s=54.1,
        d2h_gb_s=53.2,
        samples=20,
        sm_clock_mhz=Spread(1410.0, 1980.0, 1980.0),
        power_w=Spread(300.0, 690.0, 700.0),
        clocks_events={0x4: 12, 0x80: 3},
    )
    load = NodeLoad("n1", "bf16", 2.0, 8192, (gpu,), "")
    data = json.loads(json.dumps(load.to_json()))
    assert data["devices"][0]["clocks_events"] == {"0x4": 12, "0x80": 3}
    assert NodeLoad.from_json(data) == load


def test_bad_json_names_the_field(cpu_load: NodeLoad) -> None:
    data = cpu_load.to_json()
    data["devices"][0]["clocks_events"] = {"power brake": 3}
    with pytest.raises(RunDirError, match="clocks_events"):
        NodeLoad.from_json(data, "load.json")


def test_an_unknown_precision_lists_the_known_ones() -> None:
    with pytest.raises(PreflightError, match="fp8.*fp32, tf32, bf16, fp16"):
        run_node_load("fp8", duration_s=0.1)


def test_the_modules_import_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import toolkit.preflight.load.node, toolkit.preflight.load.device_checks\n"
        "assert 'torch' not in {m for m, v in sys.modules.items() if v is not None}\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)


def test_the_sampler_sees_throttling_that_starts_during_the_load() -> None:
    gpu = FakeGpu(uuid="GPU-0", sm_clock_mhz=1980, average_power_mw=690_000)
    fake = FakeNvml([gpu])
    fake.nvmlInit()
    with NvmlSampler(fake, [fake.nvmlDeviceGetHandleByIndex(0)], interval_s=0.01) as sampler:
        time.sleep(0.15)
        gpu.clocks_event_reasons = 0x80 | 0x4  # a power brake, then the power cap
        gpu.sm_clock_mhz = 1200
        gpu.average_power_mw = 350_000
        time.sleep(0.15)
    samples, clock, power, events = sampler.results(0)
    assert samples >= 10
    assert clock is not None and clock.min == 1200 and clock.max == 1980
    assert power is not None and power.min == 350 and power.max == 690
    assert 0 < events[0x80] < samples and events[0x4] == events[0x80]
    assert set(events) == {0x4, 0x80}


def test_a_reading_nvml_refuses_is_left_out() -> None:
    gpu = FakeGpu(uuid="GPU-0", unsupported={"nvmlDeviceGetPowerUsage"})
    fake = FakeNvml([gpu])
    fake.nvmlInit()
    with NvmlSampler(fake, [fake.nvmlDeviceGetHandleByIndex(0)], interval_s=0.01) as sampler:
        time.sleep(0.1)
    samples, clock, power, events = sampler.results(0)
    assert samples > 0 and clock is not None and power is None and events == {}


# argv: the GEMM's seconds, the one CPU to run the load test on (after the imports).
LOAD_SCRIPT = (
    "import json, os, sys\n"
    "from toolkit.preflight.load.node import run_node_load\n"
    "import torch\n"
    "os.sched_setaffinity(0, {int(sys.argv[2])})\n"
    "print(json.dumps(run_node_load('fp32', float(sys.argv[1])).to_json()))\n"
)


def _load_in_subprocess(duration_s: float, cpu: int) -> NodeLoad:
    """``run_node_load`` in a process of its own, on CPU ``cpu`` only."""
    done = subprocess.run(
        [sys.executable, "-c", LOAD_SCRIPT, str(duration_s), str(cpu)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return NodeLoad.from_json(json.loads(done.stdout))


@pytest.fixture
def shared_cpu() -> Iterator[int]:
    """A CPU with a process spinning on it, as a competing job on a node would."""
    cpu = min(os.sched_getaffinity(0))
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(spin.pid, {cpu})
        yield cpu
    finally:
        spin.kill()
        spin.wait()


def test_a_cpu_starved_node_reports_and_is_named_among_its_peers(
    shared_cpu: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load test that shares its only CPU with a spinning process still completes
    and reports; products that take twice the wall time (half a core each) halve its
    GEMM figure, and the grading names that node among two fed peers.

    How much less a really starved node measures is a benchmark
    (``benchmarks/timing_targets.py gemm``).
    """
    starved_load = _load_in_subprocess(0.3, shared_cpu)
    (device,) = starved_load.devices
    assert device.device == "cpu" and device.gemm_tflops > 0 and device.memory_gb_s > 0
    assert NodeLoad.from_json(json.loads(json.dumps(starved_load.to_json()))) == starved_load

    fed_tflops, _ = timed_gemm(monkeypatch, product_s=0.002, duration_s=0.3)
    starved_tflops, _ = timed_gemm(monkeypatch, product_s=0.004, duration_s=0.3)
    assert starved_tflops == pytest.approx(fed_tflops / 2, rel=1e-9)
    loads = {
        name: dataclasses.replace(
            starved_load, devices=(dataclasses.replace(device, gemm_tflops=tflops),)
        )
        for name, tflops in (("a", fed_tflops), ("b", fed_tflops), ("c", starved_tflops))
    }
    gemm = {c.scope: c for c in load_checks(loads) if c.name == "load.gemm"}
    assert {n: c.status for n, c in gemm.items()} == {"a": "pass", "b": "pass", "c": "fail"}
    assert gemm["c"].measured.startswith("cpu fail:") and "50% of the median" in gemm["c"].measured
