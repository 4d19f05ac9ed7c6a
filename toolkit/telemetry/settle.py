"""Idle baselines and cooldowns, read live from the running samplers.

Before a run: the cluster's power at rest over ``baseline_s`` (every node's sampler is
already running, nothing else is). After it: sample in windows until the power is
back near that baseline and the hottest temperature has stopped moving, or a time
limit passes; either way the result says which. Runs of a sweep that each start from
a settled cluster can be compared.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from toolkit.rundir import IdleBaseline, IdleCooldown, IdleRecord, RunDir
from toolkit.telemetry.sampler import PowerWindow


class Windows(Protocol):
    """Something that reports per node power and temperature over a recent window."""

    def window(self, seconds: float) -> Mapping[str, PowerWindow]:
        """Node -> its power and hottest temperature over the last ``seconds``."""


@dataclass(frozen=True)
class CooldownRule:
    """When a cluster counts as settled after a run."""

    max_s: float = 120.0
    window_s: float = 5.0
    power_tolerance_w: float = 5.0  # or 5% of the baseline, whichever is larger
    temperature_tolerance_c: float = 2.0  # change of the hottest reading between windows


def total_power_w(window: Mapping[str, PowerWindow]) -> float | None:
    """The cluster's power: the sum of every node's that reported one."""
    values = [w.power_w for w in window.values() if w.power_w is not None]
    return sum(values) if values else None


def hottest_c(window: Mapping[str, PowerWindow]) -> float | None:
    """The hottest temperature any node reported (None: no sensor gives one)."""
    values = [w.temperature_c for w in window.values() if w.temperature_c]
    return max(values) if values else None


def is_settled(
    baseline_w: float | None,
    power_w: float | None,
    previous_c: float | None,
    temperature_c: float | None,
    rule: CooldownRule,
) -> bool:
    """Power near the baseline and the temperature no longer moving (unknowns pass)."""
    power_ok = (
        baseline_w is None
        or power_w is None
        or power_w <= baseline_w + max(rule.power_tolerance_w, 0.05 * baseline_w)
    )
    if temperature_c is None:
        return power_ok
    if previous_c is None:
        return False  # one reading says nothing about a trend
    return power_ok and abs(temperature_c - previous_c) <= rule.temperature_tolerance_c


def measure_baseline(
    windows: Windows, seconds: float, sleep: Callable[[float], None] = time.sleep
) -> IdleBaseline:
    """Wait ``seconds`` with the samplers running, then read the cluster at rest."""
    sleep(seconds)
    window = windows.window(seconds)
    return IdleBaseline(
        duration_s=seconds,
        power_w=total_power_w(window),
        temperature_c=hottest_c(window),
        per_node_power_w={n: w.power_w for n, w in window.items()},
    )


def cool_down(
    windows: Windows,
    baseline_w: float | None,
    rule: CooldownRule,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> IdleCooldown:
    """Sample window after window until settled or ``rule.max_s`` has passed."""
    began = clock()
    previous_c: float | None = None
    while True:
        sleep(rule.window_s)
        window = windows.window(rule.window_s)
        power_w, temperature_c = total_power_w(window), hottest_c(window)
        settled = is_settled(baseline_w, power_w, previous_c, temperature_c, rule)
        elapsed_s = clock() - began
        if settled or elapsed_s >= rule.max_s:
            return IdleCooldown(
                duration_s=elapsed_s,
                settled=settled,
                power_w=power_w,
                temperature_c=temperature_c,
                baseline_power_w=baseline_w,
                max_s=rule.max_s,
            )
        previous_c = temperature_c


class IdlePhases:
    """The baseline before a workload and the cooldown after it, kept in ``idle.json``."""

    def __init__(
        self,
        windows: Windows,
        run_dir: str | Path,
        baseline_s: float,
        cooldown_max_s: float,
        say: Callable[[str], None] = print,
    ) -> None:
        self.windows = windows
        self.path = RunDir(run_dir).idle
        self.baseline_s = baseline_s
        self.rule = CooldownRule(max_s=cooldown_max_s)
        self.say = say
        self.result = IdleRecord()

    def before(self) -> None:
        """Measure the idle baseline (when asked for)."""
        if self.baseline_s:
            baseline = measure_baseline(self.windows, self.baseline_s)
            self.result = dataclasses.replace(self.result, baseline=baseline)
            self.say(f"idle baseline {_watts(baseline.power_w)}")

    def after(self) -> None:
        """Cool down until settled or the limit (when asked for)."""
        if self.rule.max_s:
            baseline_w = self.result.baseline.power_w if self.result.baseline else None
            done = cool_down(self.windows, baseline_w, self.rule)
            self.result = dataclasses.replace(self.result, cooldown=done)
            state = "settled" if done.settled else "NOT settled"
            self.say(f"cooldown {done.duration_s or 0:.1f} s, {state} at {_watts(done.power_w)}")

    def save(self) -> None:
        """Write ``idle.json`` (nothing when neither phase ran)."""
        if self.result.baseline is not None or self.result.cooldown is not None:
            self.result.write(self.path)


def _watts(power_w: float | None) -> str:
    return "unknown power" if power_w is None else f"{power_w:.1f} W"
