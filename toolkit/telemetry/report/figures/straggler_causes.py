"""Why the straggler is late: its GPU and host over its late stretches, against the others'.

A rank's *stretch* before a step's collective (a barrier, or the step's all-reduce
read from backward phases) runs from the moment the previous collective let it go to
the moment it arrived at this one: its compute, its input, its host's share of both.
For each rank last to arrive more often than its share, the stretches before the
collectives it was last at are compared with the other ranks' stretches before the
same collectives, on what the telemetry recorded during them: its GPU's throttle
reasons (thermal, power cap, hardware slowdown), power limit, SM clock and
temperature, its host's CPU, and its input phase where the ranks mark one. The cause
named is the strongest finding; a straggler with none is ``unexplained``, with what
was ruled out. Network traffic is not sampled, so a network cause is never named.

The signals are gathered node by node while the report holds that node's samples
(``StretchSignals.add``, as ``WaitEnergy`` does): a mean per stretch and signal, flat
arrays the size of the waits, never the samples themselves.

A slowness score per rank follows nvidia-resiliency-ext's: the fastest rank's median
stretch over this rank's, 1.0 for the fastest, over the run and per window of steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from toolkit.json_types import JsonObject
from toolkit.telemetry.report.figures.stragglers import Stragglers
from toolkit.telemetry.report.inputs.series import DeviceSeries, FloatArray
from toolkit.telemetry.report.inputs.spans import BoolArray, Phases, Waits

THERMAL_BITS = 0x20 | 0x40  # sw_thermal, hw_thermal
POWER_CAP_BITS = 0x4 | 0x80  # sw_power_cap, hw_power_brake
HW_SLOWDOWN_BITS = 0x8
BIT_SIGNALS = (("thermal", THERMAL_BITS), ("power_cap", POWER_CAP_BITS), ("hw", HW_SLOWDOWN_BITS))
# Phase names that are a rank's input (its data loader), as scripts mark them.
BUSY_PCT = 50.0  # a GPU sample at this utilisation or more: the GPU works (its clock counts)
INPUT_PHASES = frozenset({"data", "dataloader", "input", "load", "next(dataloader)"})
GPU_SIGNALS = ("sm_clock_mhz", "temperature_c", "power_limit_w", "thermal", "power_cap", "hw")
SIGNALS = (*GPU_SIGNALS, "host_cpu_pct", "input_s")
WINDOWS = 10  # score windows over the run's steps
NOT_MEASURED = ("network (no traffic sensor)",)


def interval_means(
    t_s: FloatArray, values: FloatArray, start_s: FloatArray, end_s: FloatArray
) -> FloatArray:
    """The mean of the samples inside each ``[start, end]`` (NaN where none falls)."""
    if t_s.size == 0:
        return np.full(start_s.size, np.nan)
    total = np.concatenate([[0.0], np.cumsum(values)])
    lo = np.searchsorted(t_s, start_s, side="left")
    hi = np.searchsorted(t_s, end_s, side="right")
    count = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        means: FloatArray = np.where(count > 0, (total[hi] - total[lo]) / count, np.nan)
    return means


class StretchSignals:
    """Every wait's stretch and the telemetry's mean over it, filled node by node."""

    def __init__(self, waits: Waits, phases: Phases | None = None) -> None:
        """Stretches from ``waits``; their input time from ``phases`` when marked."""
        self.waits = waits
        n = len(waits)
        self.start_s: FloatArray = np.full(n, np.nan)
        order = np.lexsort((waits.exit_s, waits.rank))
        same_rank = waits.rank[order][1:] == waits.rank[order][:-1]
        previous_exit = np.where(same_rank, waits.exit_s[order][:-1], np.nan)
        self.start_s[order[1:]] = previous_exit
        self.values: dict[str, FloatArray] = {name: np.full(n, np.nan) for name in SIGNALS}
        self.gpu_index: dict[str, int] = {}  # GPU UUID -> NVML's index on its node
        if phases is not None:
            self._input(phases)

    @property
    def stretch_s(self) -> FloatArray:
        """Each wait's stretch (NaN for a rank's first)."""
        stretch: FloatArray = self.waits.enter_s - self.start_s
        return stretch

    def add(self, node: str, series: Mapping[str, DeviceSeries]) -> None:
        """Means over the stretches of ``node``'s ranks, from its devices' samples."""
        waits = self.waits
        if node not in waits.nodes:
            return
        here = (waits.node == waits.nodes.index(node)) & ~np.isnan(self.start_s)
        for i, uuid in enumerate(waits.devices):
            gpu = series.get(uuid)
            mine = np.flatnonzero(here & (waits.device == i))
            if gpu is not None and mine.size:
                self._fill_gpu(gpu, mine)
                index = getattr(gpu.info, "nvml_index", None)
                if isinstance(index, int):
                    self.gpu_index[uuid] = index
        host = series.get("host")
        if host is not None:
            mine = np.flatnonzero(here)
            self._fill(host, "cpu_util_pct", "host_cpu_pct", mine)

    def _fill_gpu(self, gpu: DeviceSeries, rows: np.ndarray) -> None:
        for name in ("temperature_c", "power_limit_w"):
            self._fill(gpu, name, name, rows)
        # The SM clock while the GPU works: an idle GPU clocks down, so a rank late for
        # another cause (its input) would read as clocked down over its whole stretch.
        t, clock = gpu.values("sm_clock_mhz")
        t_util, util = gpu.values("gpu_util_pct")
        if t_util.size == t.size and np.array_equal(t_util, t):
            t, clock = t[util >= BUSY_PCT], clock[util >= BUSY_PCT]
        start, end = self.start_s[rows], self.waits.enter_s[rows]
        self.values["sm_clock_mhz"][rows] = interval_means(t, clock, start, end)
        t, reasons = gpu.values("clocks_event_reasons")
        bits = reasons.astype(np.int64)
        start, end = self.start_s[rows], self.waits.enter_s[rows]
        for signal, mask in BIT_SIGNALS:
            self.values[signal][rows] = interval_means(t, (bits & mask != 0) * 1.0, start, end)

    def _fill(self, device: DeviceSeries, reading: str, signal: str, rows: np.ndarray) -> None:
        t, values = device.values(reading)
        self.values[signal][rows] = interval_means(
            t, values, self.start_s[rows], self.waits.enter_s[rows]
        )

    def _input(self, phases: Phases) -> None:
        """Each wait's input time: its rank's input phases that end inside its stretch."""
        codes = [i for i, name in enumerate(phases.names) if name in INPUT_PHASES]
        if not codes:
            return
        spans = phases.spans
        is_input = np.isin(phases.name, codes)
        input_s = self.values["input_s"]
        for rank in np.unique(self.waits.rank).tolist():
            mine = np.flatnonzero(self.waits.rank == rank)
            theirs = np.flatnonzero(is_input & (spans.rank == rank))
            if theirs.size == 0:
                continue
            order = np.argsort(spans.exit_s[theirs])
            ends = spans.exit_s[theirs][order]
            total = np.concatenate([[0.0], np.cumsum(spans.wait_s[theirs][order])])
            lo = np.searchsorted(ends, self.start_s[mine], side="left")
            hi = np.searchsorted(ends, self.waits.enter_s[mine], side="right")
            input_s[mine] = np.where(np.isnan(self.start_s[mine]), np.nan, total[hi] - total[lo])


@dataclass(frozen=True)
class Finding:
    """One likely cause, with its figures: ``text`` reads after the rank's name."""

    cause: str
    text: str
    strength: float


@dataclass(frozen=True)
class StragglerCause:
    """Why one rank kept the others waiting.

    Attributes:
        rank: The rank.
        node: Its node.
        gpu: Its GPU (its UUID), or None for a rank without one.
        gpu_index: That GPU's index on its node, when known.
        last: Collectives at which it arrived last.
        barriers: Collectives at which two or more ranks waited.
        cause: The strongest finding's cause, or ``unexplained``.
        findings: Every finding, strongest first.
        ruled_out: What was looked at and found as the others' (figures included).
        not_measured: What could not be looked at.
    """

    rank: int
    node: str
    gpu: str | None
    gpu_index: int | None
    last: int
    barriers: int
    cause: str
    findings: list[Finding]
    ruled_out: list[str]
    not_measured: list[str] = field(default_factory=lambda: list(NOT_MEASURED))

    @property
    def last_share(self) -> float:
        """The share of the collectives it was last at."""
        return self.last / self.barriers if self.barriers else 0.0

    def to_json(self) -> JsonObject:
        """summary.json's ``stragglers.causes[]`` entry."""
        return {
            "rank": self.rank,
            "node": self.node,
            "gpu": self.gpu,
            "gpu_index": self.gpu_index,
            "last": self.last,
            "of": self.barriers,
            "cause": self.cause,
            "findings": [{"cause": f.cause, "text": f.text} for f in self.findings],
            "ruled_out": list(self.ruled_out),
            "not_measured": list(self.not_measured),
            "line": self.line(),
        }

    def line(self) -> str:
        """``rank 5 (node03 GPU 2) last at 71% of steps: SM clock ... vs ...``."""
        where = self.node + (f" GPU {self.gpu_index}" if self.gpu_index is not None else "")
        head = f"rank {self.rank} ({where}) last at {self.last_share:.0%} of steps"
        if self.findings:
            return f"{head}: " + ", ".join(f.text for f in self.findings)
        ruled = "; ".join(self.ruled_out) or "nothing the telemetry recorded"
        return f"{head}: unexplained (ruled out: {ruled})"


@dataclass(frozen=True)
class SlownessScores:
    """Per rank, the fastest rank's median stretch over its own (1.0: the fastest).

    Attributes:
        run: Rank -> its score over the run.
        windows: Per window of steps, its first and last step and rank -> score.
    """

    run: dict[int, float]
    windows: list[tuple[int, int, dict[int, float]]]

    def to_json(self) -> JsonObject:
        """summary.json's ``stragglers.scores``: rank (as text) -> score, and per window."""
        return {
            "basis": "fastest rank's median stretch over the rank's (1: the fastest)",
            "run": {str(r): v for r, v in self.run.items()},
            "windows": [
                {"first_step": a, "last_step": b, "ranks": {str(r): v for r, v in by.items()}}
                for a, b, by in self.windows
            ],
        }


def scores(signals: StretchSignals, windows: int = WINDOWS) -> SlownessScores:
    """Slowness scores over the run and per window of steps (equal numbers of steps)."""
    waits = signals.waits
    stretch = signals.stretch_s
    ok = ~np.isnan(stretch) & (stretch > 0)
    steps = np.unique(waits.step[ok])
    if steps.size == 0:
        return SlownessScores({}, [])
    parts = [p for p in np.array_split(steps, min(windows, steps.size)) if p.size]
    per_window = []
    for part in parts:
        chosen = ok & np.isin(waits.step, part)
        per_window.append((int(part[0]), int(part[-1]), _scores(waits.rank, stretch, chosen)))
    return SlownessScores(_scores(waits.rank, stretch, ok), per_window)


def _scores(rank: np.ndarray, stretch: FloatArray, chosen: BoolArray) -> dict[int, float]:
    medians = {
        int(r): float(np.median(stretch[chosen & (rank == r)]))
        for r in np.unique(rank[chosen]).tolist()
    }
    if not medians:
        return {}
    fastest = min(medians.values())
    return {r: round(fastest / m, 3) if m > 0 else 1.0 for r, m in medians.items()}


def straggler_causes(signals: StretchSignals, summary: Stragglers | None) -> list[StragglerCause]:
    """A cause for every rank last more often than its share, most often last first."""
    if summary is None or summary.barriers == 0 or len(summary.ranks) < 2:
        return []
    waits = signals.waits
    late = _last_of_step(waits)
    share = summary.barriers / len(summary.ranks)
    floor = max(3.0, 1.5 * share, share + 0.25 * summary.barriers)
    found = []
    for rank in sorted(summary.ranks, key=lambda r: (-r.last, r.rank)):
        if rank.last < floor:
            continue
        steps = np.unique(waits.step[late[waits.rank[late] == rank.rank]])
        at_steps = np.isin(waits.step, steps)
        mine = at_steps & (waits.rank == rank.rank)
        others = at_steps & (waits.rank != rank.rank)
        late_s = _lateness_s(waits, mine)
        typical_s = np.nanmedian(signals.stretch_s[mine]) if mine.any() else np.nan
        # Last by a hair is a tie: it must arrive a twentieth of a stretch after the rest.
        if not late_s > max(0.01, 0.05 * (typical_s if np.isfinite(typical_s) else 0.0)):
            continue
        shared_host = set(waits.node[others].tolist()) <= {int(waits.node[mine][0])}
        findings, ruled_out = _compare(signals, mine, others, shared_host, late_s)
        findings.sort(key=lambda f: -f.strength)
        gpu_code = int(waits.device[mine][0])
        gpu = waits.devices[gpu_code] if gpu_code >= 0 else None
        found.append(
            StragglerCause(
                rank=rank.rank,
                node=rank.node,
                gpu=gpu,
                gpu_index=signals.gpu_index.get(gpu) if gpu is not None else None,
                last=rank.last,
                barriers=summary.barriers,
                cause=findings[0].cause if findings else "unexplained",
                findings=findings,
                ruled_out=ruled_out,
            )
        )
    return found


def _lateness_s(waits: Waits, mine: BoolArray) -> float:
    """How late the rank came: the median over ``mine`` of its arrival after the step's median."""
    order = np.lexsort((waits.enter_s, waits.step))
    steps = waits.step[order]
    starts = np.flatnonzero(np.append(True, steps[1:] != steps[:-1]))
    counts = np.diff(np.append(starts, steps.size))
    median_enter_s = waits.enter_s[order[starts + (counts - 1) // 2]]
    at = np.searchsorted(steps[starts], waits.step[mine])
    lateness = waits.enter_s[mine] - median_enter_s[at]
    return float(np.median(lateness)) if lateness.size else 0.0


def _last_of_step(waits: Waits) -> np.ndarray:
    """Index of the last arrival at each step where two or more ranks waited."""
    order = np.lexsort((waits.enter_s, waits.step))
    steps = waits.step[order]
    ends = np.append(steps[1:] != steps[:-1], True)
    starts = np.append(True, steps[1:] != steps[:-1])
    count = np.diff(np.append(np.flatnonzero(starts), steps.size))
    last: np.ndarray = order[ends][count >= 2]
    return last


def _compare(
    signals: StretchSignals,
    mine: BoolArray,
    others: BoolArray,
    shared_host: bool,
    late_s: float,
) -> tuple[list[Finding], list[str]]:
    """The findings for the rank's stretches ``mine`` against the same steps' ``others``."""
    waits = signals.waits

    ranks = waits.rank[others]
    codes, rank_code = np.unique(ranks, return_inverse=True)

    def pair(signal: str) -> tuple[float, float]:
        """The rank's mean, and the median over the other ranks of theirs."""
        values = signals.values[signal]
        own = values[mine]
        own_value = float(np.nanmean(own)) if np.isfinite(own).any() else np.nan
        theirs = values[others]
        ok = np.isfinite(theirs)
        sums = np.bincount(rank_code[ok], weights=theirs[ok], minlength=codes.size)
        counts = np.bincount(rank_code[ok], minlength=codes.size)
        means = sums[counts > 0] / counts[counts > 0]
        return own_value, float(np.median(means)) if means.size else np.nan

    findings: list[Finding] = []
    ruled: list[str] = []
    temp, temp_ref = pair("temperature_c")
    for signal, cause, label in (
        ("thermal", "thermal", "thermal slowdown"),
        ("power_cap", "power_cap", "power-cap throttling"),
        ("hw", "hw_slowdown", "hardware slowdown"),
    ):
        own, ref = pair(signal)
        if not np.isfinite(own):
            continue
        if own >= 0.2 and own - (ref if np.isfinite(ref) else 0.0) >= 0.2:
            text = f"{label} {own:.0%} of its steps"
            if cause == "thermal" and np.isfinite(temp):
                versus = f" vs {temp_ref:.0f} °C" if np.isfinite(temp_ref) else ""
                text += f", {temp:.0f} °C{versus}"
            findings.append(Finding(cause, text, 1.0 + own))
        else:
            ruled.append(f"{label} {own:.0%} of its steps vs {ref:.0%}")
    limit, limit_ref = pair("power_limit_w")
    if np.isfinite(limit) and np.isfinite(limit_ref):
        if limit < 0.95 * limit_ref:
            text = f"power limit {limit:,.0f} W vs {limit_ref:,.0f} W median"
            findings.append(Finding("power_limit", text, 1.0 + 1.0 - limit / limit_ref))
        else:
            ruled.append(f"power limit {limit:,.0f} W as others' {limit_ref:,.0f} W")
    clock, clock_ref = pair("sm_clock_mhz")
    if np.isfinite(clock) and np.isfinite(clock_ref) and clock_ref > 0:
        if clock < 0.9 * clock_ref:
            text = f"SM clock {clock:,.0f} MHz vs {clock_ref:,.0f} MHz median"
            findings.append(Finding("clocks", text, 1.0 - clock / clock_ref))
        else:
            ruled.append(f"SM clock {clock:,.0f} MHz as others' {clock_ref:,.0f} MHz")
    cpu, cpu_ref = pair("host_cpu_pct")
    if np.isfinite(cpu) and np.isfinite(cpu_ref) and not shared_host:
        if cpu >= 70.0 and cpu - cpu_ref >= 20.0:
            text = f"host CPU {cpu:.0f}% busy vs {cpu_ref:.0f}% median"
            findings.append(Finding("host_cpu", text, (cpu - cpu_ref) / 100.0 + 0.3))
        else:
            ruled.append(f"host CPU {cpu:.0f}% busy vs {cpu_ref:.0f}%")
    read, read_ref = pair("input_s")
    if np.isfinite(read) and np.isfinite(read_ref):
        if read > 1.5 * read_ref and read - read_ref >= 0.3 * late_s:
            text = f"input {read:.2f} s a step vs {read_ref:.2f} s median"
            strength = 0.5 + min((read - read_ref) / max(late_s, 1e-9), 1.0)
            findings.append(Finding("input", text, strength))
        else:
            ruled.append(f"input {read:.2f} s a step vs {read_ref:.2f} s")
    return findings, ruled
