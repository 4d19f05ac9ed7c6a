"""The per-node sampler: schedule, format, crash loss, the energy counter's own rate.

On this machine's real host sensor, and on NVML's fake for the GPU energy counter.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_nvml import FakeGpu, FakeNvml

from toolkit.rundir.traces import read_table, row_dicts
from toolkit.telemetry.sampler import EnergySchedule, Sampler
from toolkit.telemetry.sensors.host import HostSensor
from toolkit.telemetry.sensors.nvml import NvmlSensor


def lines(path: Path) -> list[dict[str, object]]:
    """The samples of a live trace, up to its last whole batch (a kill may cut one)."""
    return [row for batch in read_table([path]).to_batches() for row in row_dicts(batch)]


@pytest.mark.timing
def test_samples_at_the_rate_with_both_clocks(tmp_path: Path) -> None:
    path = tmp_path / "samples.arrows"
    sampler = Sampler([HostSensor()], path, rate_hz=20.0)
    began = time.time()
    sampler.start()
    time.sleep(1.0)
    stats = sampler.stop()
    rows = lines(path)
    assert 15 <= len(rows) <= 25, len(rows)
    assert stats.samples == len(rows) and stats.errors == 0
    for row in rows:
        assert row["device"] == "host" and row["kind"] == "host"
        assert began <= float(row["wall_s"]) <= time.time()  # type: ignore[arg-type]
        assert "mono_s" in row and "memory_used_bytes" in row
    mono = [float(r["mono_s"]) for r in rows]  # type: ignore[arg-type]
    gaps = [b - a for a, b in zip(mono, mono[1:], strict=False)]
    assert max(gaps) < 0.2  # 50 ms period, no tick lost on an idle machine


@pytest.mark.timing
def test_a_killed_sampler_loses_at_most_about_a_second(tmp_path: Path) -> None:
    path = tmp_path / "samples.arrows"
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit.telemetry.sampler", str(path), "--sensors", "host"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline())["started"]
    time.sleep(2.6)
    killed_at = time.time()
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    rows = lines(path)
    assert rows, "nothing reached the file"
    last = float(rows[-1]["wall_s"])  # type: ignore[arg-type]
    assert killed_at - last < 1.3, killed_at - last


def test_sigterm_stops_cleanly_with_everything_flushed(tmp_path: Path) -> None:
    path = tmp_path / "samples.arrows"
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit.telemetry.sampler", str(path), "--rate-hz", "20"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    stats = json.loads(out.strip().splitlines()[-1])
    assert stats["samples"] == len(lines(path)) > 0


# -- the energy counter's own rate -----------------------------------------------------------


def test_energy_schedule_reads_once_a_period_from_the_first_tick() -> None:
    # 50 Hz ticks, a full reading every 5th (10 Hz), energy at 1 Hz, over 3 s.
    schedule = EnergySchedule(1.0, 0.02)
    read = [t for t in range(150) if t % 5 == 0 and schedule.due(t * 0.02)]
    assert read == [0, 50, 100]
    # A due tick that was skipped (the sampler fell behind) leaves it to the next one.
    late = EnergySchedule(1.0, 0.1)
    assert [late.due(t) for t in (0.0, 0.5, 1.3, 1.4, 1.9, 2.0)] == [
        True, False, True, False, False, True,
    ]  # fmt: skip
    # At the full rate, every full reading is due (float noise included).
    every = EnergySchedule(10.0, 0.1)
    assert all(every.due(t * 0.1) for t in range(100))


def gpu_rows(path: Path) -> dict[str, list[dict[str, object]]]:
    rows: dict[str, list[dict[str, object]]] = {}
    for row in lines(path):
        if str(row["kind"]).startswith("gpu"):
            rows.setdefault(str(row["device"]), []).append(row)
    return rows


@pytest.mark.timing
def test_energy_counter_read_at_its_own_rate_and_with_the_first_and_last(
    tmp_path: Path,
) -> None:
    fake = FakeNvml([FakeGpu(uuid=f"GPU-{i}") for i in range(2)])
    path = tmp_path / "samples.arrows"
    sampler = Sampler(
        [NvmlSensor(fake)], path, rate_hz=20.0, power_rate_hz=40.0, energy_rate_hz=4.0
    )
    sampler.start()
    time.sleep(1.2)
    stats = sampler.stop()
    by_gpu = gpu_rows(path)
    assert sorted(by_gpu) == ["GPU-0", "GPU-1"]
    for uuid, rows in by_gpu.items():
        full = [r for r in rows if r["kind"] == "gpu"]
        with_energy = [r for r in full if r.get("energy_j") is not None]
        # Every counter call made it into the trace, and only full readings carry it.
        assert fake.fake_count("nvmlDeviceGetTotalEnergyConsumption", uuid) == len(with_energy)
        assert all(r.get("energy_j") is None for r in rows if r["kind"] == "gpu_power")
        # The first reading and the last (taken by stop) carry the counter ...
        assert rows[0] is full[0] and full[0].get("energy_j") is not None
        assert rows[-1] is full[-1] and full[-1].get("energy_j") is not None
        # ... the full readings in between mostly do not (not a stale copy) ...
        assert len(with_energy) < len(full)
        assert len(with_energy) == stats.energy_reads
        # ... and the schedule's reads are due a period apart (0.25 s; the stop's own
        # read aside): a slower machine reads fewer, never more.
        span_s = float(full[-1]["mono_s"]) - float(full[0]["mono_s"])  # type: ignore[arg-type]
        assert len(with_energy) - 1 <= span_s / 0.25 + 2


def test_energy_rate_zero_reads_the_counter_with_every_full_reading(tmp_path: Path) -> None:
    fake = FakeNvml([FakeGpu(uuid="GPU-0")])
    path = tmp_path / "samples.arrows"
    sampler = Sampler([NvmlSensor(fake)], path, rate_hz=20.0, energy_rate_hz=None)
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    [rows] = gpu_rows(path).values()
    assert rows and all(r.get("energy_j") is not None for r in rows)
    assert fake.fake_count("nvmlDeviceGetTotalEnergyConsumption") == len(rows)


def test_a_sampler_stopped_at_once_still_has_the_counter(tmp_path: Path) -> None:
    fake = FakeNvml([FakeGpu(uuid="GPU-0")])
    path = tmp_path / "samples.arrows"
    sampler = Sampler([NvmlSensor(fake)], path, rate_hz=10.0, energy_rate_hz=0.1)
    sampler.start()
    sampler.stop()
    [rows] = gpu_rows(path).values()
    assert rows[0].get("energy_j") is not None and rows[-1].get("energy_j") is not None
