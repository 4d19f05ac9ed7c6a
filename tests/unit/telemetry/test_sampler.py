"""The per-node sampler on this machine's real host sensor: schedule, format, crash loss."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from toolkit.rundir.traces import read_table, row_dicts
from toolkit.telemetry.sampler import Sampler
from toolkit.telemetry.sensors.host import HostSensor


def lines(path: Path) -> list[dict[str, object]]:
    """The samples of a live trace, up to its last whole batch (a kill may cut one)."""
    return [row for batch in read_table([path]).to_batches() for row in row_dicts(batch)]


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
