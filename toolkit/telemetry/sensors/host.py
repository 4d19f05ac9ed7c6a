"""The host sensor: CPU utilisation, memory, RAPL energy, and node power where it can be had.

Everything is read from files under a root (``/`` on a node, a fixture tree in tests):

- ``/proc/stat`` (CPU utilisation since the previous reading) and ``/proc/meminfo``.
- RAPL energy counters under ``/sys/class/powercap``: ``intel-rapl:N`` package zones and
  their ``dram`` subzones (the same tree on AMD kernels; ``psys``, ``core`` and ``uncore``
  are skipped, the last two being inside the package). Counters are wraparound
  corrected with ``max_energy_range_uj`` and reported cumulative since the sensor
  started.
- Node wall power from ``ipmitool dcmi power reading``, at most once a second.

Where neither RAPL nor IPMI is available, power comes from a CPU model: an explicitly
labelled estimate (``power_source: "model"``), never a measurement.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolkit.rundir.devices import DeviceInfo, HostInfo, PowerModel, RaplDomain
from toolkit.rundir.reading import Reading
from toolkit.telemetry.sensors.base import Sensor, SensorError

logger = logging.getLogger(__name__)

IDLE_W_PER_CPU = 2.0
"""CPU model (an estimate, not a measurement): watts per logical CPU when idle."""
BUSY_W_PER_CPU = 8.0
"""CPU model (an estimate, not a measurement): extra watts per fully busy logical CPU."""

IPMI_COMMAND = ("ipmitool", "dcmi", "power", "reading")
IPMI_TIMEOUT_S = 2.0
IPMI_MIN_INTERVAL_S = 1.0
"""ipmitool runs at most once per this many seconds; readings in between reuse its value."""

POWERCAP_DIR = "sys/class/powercap"

IpmiRunner = Callable[[Sequence[str], float], str]
"""Runs a command (argv, timeout in seconds) and returns its stdout; raises on failure."""

_ZONE = re.compile(r"intel-rapl:(\d+)(?::(\d+))?")
_IPMI_WATTS = re.compile(r"Instantaneous power reading\s*:\s*(\d+(?:\.\d+)?)\s*Watts", re.I)
_IPMI_DEACTIVATED = re.compile(r"Power reading state is\s*:\s*deactivated", re.I)


def run_command(argv: Sequence[str], timeout_s: float) -> str:
    """Run ``argv`` and return its stdout; raise OSError or SubprocessError on failure."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=True)
    return done.stdout


def parse_ipmi_power_w(text: str) -> float | None:
    """Watts from ``ipmitool dcmi power reading`` output; None when there is no valid reading."""
    if _IPMI_DEACTIVATED.search(text):
        return None
    match = _IPMI_WATTS.search(text)
    return float(match.group(1)) if match else None


def model_power_w(cpus: int, cpu_util_pct: float) -> float:
    """The CPU model's power estimate: idle watts for every CPU plus busy watts for the load."""
    return cpus * (IDLE_W_PER_CPU + BUSY_W_PER_CPU * cpu_util_pct / 100.0)


@dataclass(frozen=True)
class CpuTimes:
    """Aggregate CPU time from ``/proc/stat`` in clock ticks."""

    busy: int
    total: int


def parse_proc_stat(text: str) -> tuple[CpuTimes | None, int]:
    """The aggregate ``cpu`` line's times, and the number of logical CPUs (``cpuN`` lines)."""
    times, cpus = None, 0
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            # user nice system idle iowait irq softirq steal; guest time is already in user.
            values = [int(v) for v in parts[1:9]]
            idle = sum(values[3:5])
            times = CpuTimes(busy=sum(values) - idle, total=sum(values))
        elif re.fullmatch(r"cpu\d+", parts[0]):
            cpus += 1
    return times, cpus


def parse_meminfo_bytes(text: str) -> dict[str, int]:
    """``/proc/meminfo`` as name -> bytes (the file's values are KiB)."""
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            out[name.strip()] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return out


@dataclass
class RaplZone:
    """One RAPL counter: a package or a DRAM domain of one socket."""

    zone: str
    domain: str  # "package" or "dram"
    name: str
    path: Path
    max_energy_range_uj: int
    last_uj: int
    total_uj: int = 0

    def advance(self) -> None:
        """Read the counter and add what it counted since the last read (wrap corrected)."""
        try:
            now_uj = int((self.path / "energy_uj").read_text())
        except (OSError, ValueError) as e:
            raise SensorError(f"host: RAPL {self.zone}/energy_uj: {e}") from e
        delta = now_uj - self.last_uj
        if delta < 0:  # the counter wrapped (once, at this sampling rate)
            delta += self.max_energy_range_uj
        self.total_uj += delta
        self.last_uj = now_uj


def find_rapl_zones(powercap: Path) -> tuple[list[RaplZone], str]:
    """The package and DRAM zones under ``powercap``, or none and the reason why."""
    shown = "/" + POWERCAP_DIR
    if not powercap.is_dir():
        return [], f"no {shown}"
    zones = []
    entries = [(m, p) for p in powercap.iterdir() if (m := _ZONE.fullmatch(p.name))]
    for match, path in sorted(entries, key=lambda e: tuple(int(g or -1) for g in e[0].groups())):
        try:
            name = (path / "name").read_text().strip()
        except OSError:
            continue
        if name.startswith("package") and match.group(2) is None:
            domain = "package"
        elif name == "dram":
            domain = "dram"
        else:  # psys (whole platform), core and uncore (inside the package)
            continue
        try:
            energy_uj = int((path / "energy_uj").read_text())
            max_uj = int((path / "max_energy_range_uj").read_text())
        except (OSError, ValueError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            return [], f"cannot read {shown}/{path.name} counters ({why}; root-only on new kernels)"
        zones.append(RaplZone(path.name, domain, name, path, max_uj, energy_uj))
    if not any(z.domain == "package" for z in zones):
        return [], f"no RAPL package zone in {shown}"
    return zones, ""


class HostSensor(Sensor):
    """This machine as a whole: one ``kind: "host"`` reading per ``read()``.

    Args:
        root: Where the file system starts (``/``; tests pass a fixture tree).
        ipmi_runner: Runs ipmitool (tests inject one); None runs the real ``ipmitool``
            when it is on PATH.
        clock: Monotonic clock in seconds (the model's energy and the IPMI cache).
    """

    name = "host"

    def __init__(
        self,
        root: str = "/",
        *,
        ipmi_runner: IpmiRunner | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._root = Path(root)
        self._clock = clock
        self._prev_cpu, self._cpus = self._read_stat()
        self._prev_cpu_s = clock()
        self._model_energy_j = 0.0
        self._zones, rapl_reason = find_rapl_zones(self._root / POWERCAP_DIR)
        self._ipmi_runner, self._ipmi_w, ipmi_reason = self._probe_ipmi(ipmi_runner)
        self._ipmi_read_s = clock()
        rapl = ", ".join(z.zone for z in self._zones)
        no_rapl = f"no RAPL: {rapl_reason}"
        model = None
        source: str | None
        if self._ipmi_runner is not None:
            source = "ipmi"
            why = "ipmitool dcmi power reading works" + (f"; RAPL {rapl}" if rapl else "")
        elif self._zones:
            source = "rapl"
            why = f"RAPL energy ({rapl}), no power_w samples; no IPMI: {ipmi_reason}"
        elif self._prev_cpu is not None and self._cpus:
            source = "model"
            why = f"{no_rapl}; no IPMI: {ipmi_reason}; power is an estimate from CPU load"
            model = PowerModel(
                idle_w_per_cpu=IDLE_W_PER_CPU,
                busy_w_per_cpu=BUSY_W_PER_CPU,
                note="estimate from CPU utilisation, not a measurement",
            )
        else:
            source = None
            why = f"{no_rapl}; no IPMI: {ipmi_reason}; no /proc/stat for the CPU model"
        self._power_source = source
        memory = self._read_meminfo()
        self._info = HostInfo(
            power_source=source,
            energy_source="rapl" if self._zones else ("model" if source == "model" else None),
            power_source_reason=why,
            rapl_domains=tuple(RaplDomain(z.zone, z.domain, z.name) for z in self._zones),
            cpus=self._cpus or None,
            model=model,
            rapl_reason=rapl_reason or None,
            ipmi_reason=ipmi_reason or None,
            memory_total_bytes=memory.get("MemTotal"),
        )
        logger.debug("host sensor: power source %s (%s)", source, why)

    @property
    def info(self) -> HostInfo:
        """This machine: CPUs, the power source in use and why, RAPL domains."""
        return self._info

    def devices(self) -> dict[str, DeviceInfo]:
        """``{"host": info}``."""
        return {"host": self._info}

    def read(self, *, energy: bool = True) -> list[Reading]:
        """One ``kind: "host"`` reading: CPU, memory, RAPL energy, power where available.

        ``energy`` is ignored: RAPL counters are files that cost microseconds to read,
        and a host without power samples draws its power curve from them.
        """
        now_s = self._clock()
        util_pct, interval_s = self._cpu_util(now_s)
        memory = self._read_meminfo()
        used_bytes: int | None = None
        total_bytes: int | None = None
        if "MemTotal" in memory:
            available = memory.get("MemAvailable")
            if available is None:  # kernels before 3.14
                available = sum(memory.get(k, 0) for k in ("MemFree", "Buffers", "Cached"))
            total_bytes = memory["MemTotal"]
            used_bytes = total_bytes - available
        power_w: float | None = None
        power_source: str | None = None
        energy_j: float | None = None
        package_j: float | None = None
        dram_j: float | None = None
        if self._power_source == "ipmi":
            power_w = self._ipmi_power_w(now_s)
            if power_w is not None:
                power_source = "ipmi"
        elif self._power_source == "model":
            if util_pct is not None and self._cpus:
                model_w = model_power_w(self._cpus, util_pct)
                self._model_energy_j += model_w * interval_s
                power_w, power_source = round(model_w, 3), "model"
            energy_j = self._model_energy_j
        if self._zones:
            for zone in self._zones:
                zone.advance()
            package_j = sum(z.total_uj for z in self._zones if z.domain == "package") / 1e6
            energy_j = package_j
            if any(z.domain == "dram" for z in self._zones):
                dram_j = sum(z.total_uj for z in self._zones if z.domain == "dram") / 1e6
                energy_j = package_j + dram_j
        return [
            Reading(
                device="host",
                kind="host",
                power_source=power_source,
                power_w=power_w,
                energy_j=energy_j,
                rapl_package_j=package_j,
                rapl_dram_j=dram_j,
                memory_used_bytes=used_bytes,
                memory_total_bytes=total_bytes,
                cpu_util_pct=None if util_pct is None else round(util_pct, 2),
            )
        ]

    def read_power(self) -> list[Reading]:
        """Nothing: host power only comes with ``read()``."""
        return []

    # -- internals ----------------------------------------------------------------------

    def _read(self, relative: str) -> str | None:
        try:
            return (self._root / relative).read_text()
        except OSError:
            return None

    def _read_stat(self) -> tuple[CpuTimes | None, int]:
        text = self._read("proc/stat")
        return parse_proc_stat(text) if text is not None else (None, 0)

    def _read_meminfo(self) -> dict[str, int]:
        text = self._read("proc/meminfo")
        return parse_meminfo_bytes(text) if text is not None else {}

    def _cpu_util(self, now_s: float) -> tuple[float | None, float]:
        """Percent busy since the last reading that saw the counters move, and that interval.

        When no tick has passed since then, nothing is reported and the interval stays
        open, so the model's energy covers all of the time.
        """
        current, _ = self._read_stat()
        previous = self._prev_cpu
        if current is None:
            return None, 0.0
        if previous is None or current.total < previous.total:
            self._prev_cpu, self._prev_cpu_s = current, now_s
            return None, 0.0
        total = current.total - previous.total
        if total == 0:
            return None, 0.0
        util = 100.0 * (current.busy - previous.busy) / total
        interval_s = now_s - self._prev_cpu_s
        self._prev_cpu, self._prev_cpu_s = current, now_s
        return min(100.0, max(0.0, util)), interval_s

    def _probe_ipmi(self, runner: IpmiRunner | None) -> tuple[IpmiRunner | None, float | None, str]:
        if runner is None:
            if shutil.which(IPMI_COMMAND[0]) is None:
                return None, None, "ipmitool not on PATH"
            runner = run_command
        try:
            power_w = parse_ipmi_power_w(runner(IPMI_COMMAND, IPMI_TIMEOUT_S))
        except (OSError, subprocess.SubprocessError) as e:
            return None, None, f"'{' '.join(IPMI_COMMAND)}' failed: {e}"
        if power_w is None:
            return None, None, f"'{' '.join(IPMI_COMMAND)}' gave no instantaneous power reading"
        return runner, power_w, ""

    def _ipmi_power_w(self, now_s: float) -> float | None:
        if self._ipmi_runner is None or now_s - self._ipmi_read_s < IPMI_MIN_INTERVAL_S:
            return self._ipmi_w
        self._ipmi_read_s = now_s
        try:
            self._ipmi_w = parse_ipmi_power_w(self._ipmi_runner(IPMI_COMMAND, IPMI_TIMEOUT_S))
        except (OSError, subprocess.SubprocessError) as e:
            logger.debug("ipmitool failed: %s", e)
            self._ipmi_w = None
        return self._ipmi_w
