"""The per-node sampler: schedule, format, crash loss, the energy counter's own rate.

On this machine's real host sensor, and on NVML's fake for the GPU energy counter.
"""

from __future__ import annotations

import inspect
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from fake_nvml import FakeGpu, FakeNvml

from toolkit.rundir.traces import iter_batches, read_table, row_dicts
from toolkit.telemetry.sampler import DEFAULT_RATE_HZ, EnergySchedule, Sampler
from toolkit.telemetry.sensors.host import HostSensor
from toolkit.telemetry.sensors.nvml import NvmlSensor


def lines(path: Path) -> list[dict[str, object]]:
    """The samples of a live trace, up to its last whole batch (a kill may cut one)."""
    return [row for batch in read_table([path]).to_batches() for row in row_dicts(batch)]


def wait_for(condition: Callable[[], bool], what: str, deadline_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail after ``deadline_s`` (a stuck sampler)."""
    give_up = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < give_up, f"no {what} after {deadline_s:g} s"
        time.sleep(0.01)


def test_samples_on_its_schedule_with_both_clocks(tmp_path: Path) -> None:
    """Every tick is one sample with both clocks, and the schedule never bursts.

    How many ticks a second the machine allows is a benchmark
    (``benchmarks/timing_targets.py sampler``); here the sampler runs until it has
    taken a few, however long that takes.
    """
    path = tmp_path / "samples.arrows"
    rate_hz = 20.0
    sampler = Sampler([HostSensor()], path, rate_hz=rate_hz)
    began_wall, began_mono = time.time(), time.monotonic()
    sampler.start()
    wait_for(lambda: sampler.stats.samples >= 5, "5 samples")
    stats = sampler.stop()
    ended_wall = time.time()
    assert not sampler.running
    rows = lines(path)
    assert stats.samples == len(rows) == stats.ticks >= 6  # one reading a tick, and the stop's
    assert stats.errors == 0
    for row in rows:
        assert row["device"] == "host" and row["kind"] == "host"
        assert began_wall <= float(row["wall_s"]) <= ended_wall  # type: ignore[arg-type]
        assert row["mono_s"] is not None and row["memory_used_bytes"] is not None
    wall = [float(r["wall_s"]) for r in rows]  # type: ignore[arg-type]
    mono = [float(r["mono_s"]) for r in rows]  # type: ignore[arg-type]
    assert mono == sorted(set(mono)) and wall == sorted(wall)
    assert (stats.first_wall_s, stats.last_wall_s) == (wall[0], wall[-1])
    # Tick n (the stop's reading aside) is taken no earlier than n periods after the
    # start: a sampler that fell behind skips ticks, it never catches up in a burst.
    for n, at_s in enumerate(mono[:-1]):
        assert at_s - began_mono >= n / rate_hz - 1e-3, (n, at_s - began_mono)


def test_a_killed_sampler_keeps_every_flush_and_loses_one_batch_at_most(tmp_path: Path) -> None:
    """``python -m toolkit.telemetry.sampler`` flushes as it runs; SIGKILL it mid-run.

    Batches reach the file while it runs, every one flushed before the kill reads
    back, and none holds more than ``flush_s`` of ticks at the rate (the sampler's
    defaults), so the buffer a kill loses is at most that. How late the last flushed
    sample is at the kill, in seconds, is a benchmark
    (``benchmarks/timing_targets.py sampler-kill``).
    """
    path = tmp_path / "samples.arrows"
    flush_s = inspect.signature(Sampler).parameters["flush_s"].default
    most_per_batch = flush_s * DEFAULT_RATE_HZ + 2  # ticks a flush_s spans, and its ends
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit.telemetry.sampler", str(path), "--sensors", "host"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["started"]
        wait_for(lambda: len(list(iter_batches([path]))) >= 3, "3 flushed batches")
        before = lines(path)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    rows = lines(path)
    assert rows[: len(before)] == before  # nothing flushed was lost
    mono = [float(r["mono_s"]) for r in rows]  # type: ignore[arg-type]
    assert mono == sorted(set(mono))
    sizes = [batch.num_rows for batch in iter_batches([path])]
    assert len(sizes) >= 3 and sum(sizes) == len(rows)
    assert max(sizes) <= most_per_batch, (sizes, most_per_batch)


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


def test_energy_counter_read_at_its_own_rate_and_with_the_first_and_last(
    tmp_path: Path,
) -> None:
    fake = FakeNvml([FakeGpu(uuid=f"GPU-{i}") for i in range(2)])
    path = tmp_path / "samples.arrows"
    sampler = Sampler(
        [NvmlSensor(fake)], path, rate_hz=20.0, power_rate_hz=40.0, energy_rate_hz=4.0
    )

    def calls(function: str) -> int:
        # A copy first (made in one step): the sampler's thread adds to the counts.
        return dict(fake.fake_calls).get((function, "GPU-1"), 0)

    def full_readings_without_the_counter() -> int:
        # Full readings ask the temperature, after the counter when they read it; the
        # stop's reading adds one to each, so the difference is never taken back.
        return calls("nvmlDeviceGetTemperature") - calls("nvmlDeviceGetTotalEnergyConsumption")

    def power_only_ticks() -> int:
        # Every tick that was no full reading; one of these may be a full one under way.
        return sampler.stats.ticks - calls("nvmlDeviceGetTemperature")

    sampler.start()
    # Run until a full reading went without the counter and a power-only tick ran,
    # however long this machine takes to tick.
    wait_for(lambda: full_readings_without_the_counter() >= 1, "full reading without energy")
    wait_for(lambda: power_only_ticks() >= 2, "power-only tick")
    stats = sampler.stop()
    by_gpu = gpu_rows(path)
    assert sorted(by_gpu) == ["GPU-0", "GPU-1"]
    for uuid, rows in by_gpu.items():
        assert any(r["kind"] == "gpu_power" for r in rows)
        full = [r for r in rows if r["kind"] == "gpu"]
        with_energy = [r for r in full if r.get("energy_j") is not None]
        # Every counter call made it into the trace, and only full readings carry it.
        assert fake.fake_count("nvmlDeviceGetTotalEnergyConsumption", uuid) == len(with_energy)
        assert all(r.get("energy_j") is None for r in rows if r["kind"] == "gpu_power")
        # The first reading and the last (taken by stop) carry the counter ...
        assert rows[0] is full[0] and full[0].get("energy_j") is not None
        assert rows[-1] is full[-1] and full[-1].get("energy_j") is not None
        # ... the full readings in between do not all carry it (not a stale copy) ...
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
