"""The per-node load test, run for real on this machine's CPU, and its NVML sampler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from conftest import REPO
from fake_nvml import FakeGpu, FakeNvml

from toolkit.errors import PreflightError, RunDirError
from toolkit.preflight.load.node import DeviceLoad, NodeLoad, NvmlSampler, Spread, run_node_load


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


@pytest.mark.timing
def test_the_gemm_runs_for_about_its_duration() -> None:
    start = time.perf_counter()
    run_node_load("fp32", duration_s=0.5, size=256)
    took_s = time.perf_counter() - start
    assert 0.5 <= took_s < 5.0  # the GEMM, then the memory copies


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


LOAD_SCRIPT = (
    "import json\n"
    "from toolkit.preflight.load.node import run_node_load\n"
    "print(json.dumps(run_node_load('fp32', 1.5).to_json()))\n"
)


def _gemm_in_subprocess() -> float:
    done = subprocess.run(
        [sys.executable, "-c", LOAD_SCRIPT],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return NodeLoad.from_json(json.loads(done.stdout)).devices[0].gemm_tflops


@pytest.fixture
def busy_cpus() -> Iterator[None]:
    """One process spinning on every CPU, as a competing job on a node would."""
    spin = [sys.executable, "-c", "while True: pass"]
    busy = [subprocess.Popen(spin) for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for p in busy:
            p.kill()
        for p in busy:
            p.wait()


@pytest.mark.timing
def test_a_cpu_starved_node_measures_clearly_less(request: pytest.FixtureRequest) -> None:
    unloaded = _gemm_in_subprocess()
    request.getfixturevalue("busy_cpus")
    starved = _gemm_in_subprocess()
    # Sharing every CPU with a spinning process halves the GEMM's share; allow for noise.
    assert starved < 0.75 * unloaded, (starved, unloaded)
