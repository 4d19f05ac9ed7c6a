"""The per-node sampler: reads its sensors on a fixed schedule and writes a live trace.

One sampler per node, in a thread, at ``rate_hz`` for full readings and optionally a
faster ``power_rate_hz`` for GPU instant power. Energy counters that cost a sensor much
to read (NVML's: about 4 ms per GPU on an H200, a third of every tick for 8 GPUs at 10 Hz)
come with the full readings at a lower ``energy_rate_hz`` only, and always with the
first and the last reading, so a run's energy is exact from the counter; the full
readings between carry no ``energy_j``. Samples are buffered and written as one
batch of the trace (``toolkit/rundir/traces.py``) at least every ``flush_s``, so killing
the process loses at most that much (the kernel keeps what was flushed). Every sample
carries ``wall_s`` and ``mono_s``; the format is in docs/telemetry.md.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from toolkit import wallclock
from toolkit.json_types import JsonObject
from toolkit.rundir.telemetry import SamplerStop, SamplerSummary
from toolkit.rundir.traces import TraceWriter
from toolkit.telemetry.sensors.base import DEFAULT_ENERGY_RATE_HZ, MAX_POWER_RATE_HZ, Sensor

logger = logging.getLogger(__name__)

DEFAULT_RATE_HZ = 10.0
RECENT_S = 60.0  # how far back ``Sampler.window`` can look


@dataclass
class SamplerStats:
    """What a sampler wrote."""

    samples: int = 0
    ticks: int = 0
    late_ticks: int = 0
    energy_reads: int = 0
    errors: int = 0
    first_wall_s: float | None = None
    last_wall_s: float | None = None
    last_error: str | None = None

    def to_json(self) -> JsonObject:
        """A JSON-ready dict."""
        return dict(vars(self))

    def summary(self) -> SamplerSummary:
        """What the manifest keeps of these statistics (its ``sampler``)."""
        stop = SamplerStop(
            self.ticks, self.late_ticks, self.energy_reads, self.errors, self.last_error
        )
        return SamplerSummary(self.samples, self.first_wall_s, self.last_wall_s, stop)


@dataclass(frozen=True)
class PowerWindow:
    """A node's power and temperature over a recent window (``Sampler.window``).

    Attributes:
        seconds: How far back the window looked.
        power_w: The sum over the node's devices of each one's mean power; None
            without a power reading in the window.
        temperature_c: The hottest reading in the window, None without one.
    """

    seconds: float
    power_w: float | None
    temperature_c: float | None


class EnergySchedule:
    """Which full readings also read the energy counters: the first, then one a period.

    Periods are whole multiples of ``1 / energy_rate_hz`` from the first tick; a tick
    that is due but skipped (the sampler fell behind, or it was not a full reading)
    leaves the counters to the next full reading.
    """

    def __init__(self, energy_rate_hz: float, tick_s: float) -> None:
        """``tick_s``: the sampler's tick; a tick within half of one of the due time is due."""
        self.period_s = 1.0 / energy_rate_hz
        self.slack_s = tick_s / 2
        self.next_s = 0.0

    def due(self, tick_at_s: float) -> bool:
        """Whether a full reading at ``tick_at_s`` (from the first tick) reads the counters.

        A True answer counts as the read: the next is due one period on.
        """
        at_s = tick_at_s + self.slack_s
        if at_s < self.next_s:
            return False
        self.next_s = (math.floor(at_s / self.period_s) + 1) * self.period_s
        return True


class Sampler:
    """Samples ``sensors`` into ``path`` until stopped."""

    def __init__(
        self,
        sensors: Sequence[Sensor],
        path: Path,
        rate_hz: float = DEFAULT_RATE_HZ,
        power_rate_hz: float | None = None,
        flush_s: float = 1.0,
        energy_rate_hz: float | None = DEFAULT_ENERGY_RATE_HZ,
    ) -> None:
        """Prepare (nothing runs until ``start``).

        Args:
            sensors: What to read.
            path: The live trace to write (a file already there is kept; the new
                stream goes beside it, see ``TraceWriter``).
            rate_hz: Full readings per second.
            power_rate_hz: Instant-power readings per second (GPUs); None or at most
                ``rate_hz`` means power comes with the full readings only.
            flush_s: Longest time a sample may stay in this process's buffer.
            energy_rate_hz: Energy counter readings per second, taken with full
                readings (and with the first and the last); None, 0 or at least
                ``rate_hz``: with every full reading.
        """
        if rate_hz <= 0:
            raise ValueError(f"rate_hz must be above 0, got {rate_hz}")
        if energy_rate_hz is not None and energy_rate_hz < 0:
            raise ValueError(f"energy_rate_hz must be 0 or more, got {energy_rate_hz}")
        power_rate_hz = power_rate_hz or rate_hz
        if power_rate_hz > MAX_POWER_RATE_HZ:
            raise ValueError(f"power_rate_hz must be at most {MAX_POWER_RATE_HZ:g}")
        self.sensors = list(sensors)
        self.path = path
        self.rate_hz = rate_hz
        self.power_rate_hz = max(power_rate_hz, rate_hz)
        self.energy_rate_hz = min(energy_rate_hz or rate_hz, rate_hz)
        self.flush_s = flush_s
        self.stats = SamplerStats()
        # The newest reading of every device (for live scraping), by device key.
        self.latest: dict[str, dict[str, object]] = {}
        # (wall_s, device, power_w, temperature_c) of the last minute or so, for
        # ``window``: idle baselines and cooldowns read it live.
        self.recent: deque[tuple[float, str, float | None, float | None]] = deque(
            maxlen=int(RECENT_S * self.power_rate_hz * 16)
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def window(self, seconds: float) -> PowerWindow:
        """Power and temperature over the last ``seconds``.

        The node's total power is the sum over its devices of each one's mean; the
        temperature is its hottest reading.
        """
        since = wallclock.wall_s() - seconds
        power: dict[str, list[float]] = {}
        temperature_c: float | None = None
        for wall_s, device, power_w, temp_c in list(self.recent):
            if wall_s < since:
                continue
            if power_w is not None:
                power.setdefault(device, []).append(float(power_w))
            if temp_c is not None:
                temperature_c = max(float(temp_c), temperature_c or float(temp_c))
        total = sum(sum(v) / len(v) for v in power.values()) if power else None
        return PowerWindow(seconds, total, temperature_c)

    def start(self) -> None:
        """Open the trace and start sampling in a daemon thread."""
        if self._thread is not None:
            return
        out = TraceWriter(self.path)
        self.path = out.path
        self._thread = threading.Thread(
            target=self._run, args=(out,), name="rtk-sampler", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> SamplerStats:
        """Stop sampling, flush and close the trace; return what was written."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self.stats

    @property
    def running(self) -> bool:
        """True while the sampling thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self, out: TraceWriter) -> None:
        # Ticks at the power rate; every k-th tick is a full reading, and a full reading
        # whose tick is due for the energy schedule reads the counters too.
        period_s = 1.0 / self.power_rate_hz
        full_every = max(1, round(self.power_rate_hz / self.rate_hz))
        energy = EnergySchedule(self.energy_rate_hz, period_s)
        began = time.monotonic()
        last_flush = began
        tick = 0
        try:
            while not self._stop.is_set():
                full = tick % full_every == 0
                self._sample(out, full=full, energy=full and energy.due(tick * period_s))
                tick += 1
                now = time.monotonic()
                if now - last_flush >= self.flush_s:
                    out.flush()
                    last_flush = now
                due = began + tick * period_s
                if due < now:  # fell behind: skip the missed ticks, never burst
                    self.stats.late_ticks += 1
                    tick = int((now - began) / period_s) + 1
                    due = began + tick * period_s
                self._stop.wait(max(0.0, due - time.monotonic()))
            # The last reading carries the counters, so the run's energy is exact.
            self._sample(out, full=True, energy=True)
        finally:
            out.flush()
            out.close()

    def _sample(self, out: TraceWriter, full: bool, energy: bool = False) -> None:
        self.stats.ticks += 1
        self.stats.energy_reads += energy
        for sensor in self.sensors:
            try:
                readings = sensor.read(energy=energy) if full else sensor.read_power()
            except Exception as e:  # noqa: BLE001 - one bad read must not end the trace
                self.stats.errors += 1
                self.stats.last_error = f"{sensor.name}: {e}"
                logger.warning("sensor %s failed: %s", sensor.name, e)
                continue
            wall_s, mono_s = wallclock.wall_s(), time.monotonic()
            for reading in readings:
                out.write_reading(reading, wall_s, mono_s)
                self.stats.samples += 1
                device = reading.device
                self.latest[device] = {
                    **self.latest.get(device, {}),
                    "wall_s": wall_s,
                    "mono_s": mono_s,
                    **reading.to_json(),
                }
                self.recent.append((wall_s, device, reading.power_w, reading.temperature_c))
            if readings:
                if self.stats.first_wall_s is None:
                    self.stats.first_wall_s = wall_s
                self.stats.last_wall_s = wall_s


def main(argv: list[str] | None = None) -> int:
    """Sample this machine into a file until SIGTERM or SIGINT (benchmarks, debugging).

    ``python -m toolkit.telemetry.sampler OUT.arrows [--sensors auto] [--rate-hz 10]
    [--power-rate-hz 0] [--energy-rate-hz 1] [--prometheus-port 0]
    [--prometheus-host ADDRESS]``: the endpoint
    listens on ``--prometheus-host`` (default ``RTK_NODE_IP``) and asks for the token in
    ``RAY_AUTH_TOKEN_PATH``, as ``prometheus.endpoint`` says.
    """
    import argparse
    import signal

    from toolkit.telemetry.sensors.factory import make_sensors

    parser = argparse.ArgumentParser(prog="python -m toolkit.telemetry.sampler")
    parser.add_argument("out", type=Path)
    parser.add_argument("--sensors", default="auto")
    parser.add_argument("--rate-hz", type=float, default=DEFAULT_RATE_HZ)
    parser.add_argument("--power-rate-hz", type=float, default=0.0)
    parser.add_argument("--energy-rate-hz", type=float, default=DEFAULT_ENERGY_RATE_HZ)
    parser.add_argument("--prometheus-port", type=int, default=0)
    parser.add_argument("--prometheus-host", default=None)
    args = parser.parse_args(argv)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    sensors = make_sensors(args.sensors)
    sampler = Sampler(
        sensors,
        args.out,
        args.rate_hz,
        args.power_rate_hz or None,
        energy_rate_hz=args.energy_rate_hz or None,
    )
    if args.prometheus_port:
        from toolkit.errors import TelemetryError
        from toolkit.telemetry.prometheus import endpoint, serve

        try:
            where = endpoint(args.prometheus_port, args.prometheus_host)
            serve(sampler, where, node=os.environ.get("RTK_NODE", ""))
        except TelemetryError as e:
            print(f"rtk: {e}", file=sys.stderr, flush=True)
            return e.exit_code
    sampler.start()
    print(json.dumps({"started": True, "sensors": [s.name for s in sensors]}), flush=True)
    done.wait()
    stats = sampler.stop()
    for sensor in sensors:
        sensor.close()
    print(json.dumps(stats.to_json()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
