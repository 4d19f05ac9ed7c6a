"""``--power-policy optimize``: one power limit for every GPU, found by profiling.

Like Zeus's ``GlobalPowerLimitOptimizer``, for every GPU of a multi-node job at once:
a warm-up window at the default limits (the baseline the report compares against),
then one window per limit of a grid from the top down, every GPU at the grid value
clamped into its own range; then the limit with the least energy per step among those
at most ``max_slowdown`` slower than the fastest (or, with ``eta``, the least of Zeus's
cost ``eta * energy + (1 - eta) * max_power * time`` per step) is kept for the rest of
the run. In slowdown mode the profile stops once two limits in a row are over the
bound: lower limits only get slower.

Pure: the same windows give the same decisions, so a restarted driver replays the
windows it recorded into a new controller and goes on where the profile was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from toolkit.power.windows import Decision, GpuKey, GpuRange, Window

# Steps of each window once the choice is made (watched and recorded, never acted on).
SETTLED_STEPS = 100


@dataclass(frozen=True)
class OptimizeSettings:
    """How the optimize policy profiles and chooses.

    Attributes:
        max_slowdown: The most a chosen limit may be slower than the fastest measured,
            as a fraction (0.05: 5% slower per step).
        eta: None to choose under ``max_slowdown``; else Zeus's weight of energy
            against time in [0, 1] (1: energy only), and the whole grid is profiled.
        warmup_steps: Steps of the warm-up window at the default limits.
        steps_per_limit: Steps of each profiled limit's window.
        grid_step_w: Watts between the grid's limits.
    """

    max_slowdown: float = 0.05
    eta: float | None = None
    warmup_steps: int = 10
    steps_per_limit: int = 5
    grid_step_w: float = 25.0

    def __post_init__(self) -> None:
        check_setting("max_slowdown", self.max_slowdown, 0.0, 1.0, "0 <= max_slowdown <= 1")
        if self.eta is not None:
            check_setting("eta", self.eta, 0.0, 1.0, "None or 0 <= eta <= 1")
        check_setting("warmup_steps", self.warmup_steps, 1, None, "an integer >= 1")
        check_setting("steps_per_limit", self.steps_per_limit, 1, None, "an integer >= 1")
        check_setting("grid_step_w", self.grid_step_w, 1.0, None, "grid_step_w >= 1 W")


def check_setting(name: str, value: float, low: float, high: float | None, allowed: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``low <= value <= high``.

    An int ``low`` asks for an int (bools are neither).
    """
    whole = isinstance(low, int) and not isinstance(value, int | bool)
    # Written so that NaN fails too.
    inside = value >= low and (high is None or value <= high)
    if whole or isinstance(value, bool) or not inside:
        raise ValueError(f"power settings: {name}={value!r} is out of range; allowed: {allowed}")


@dataclass(frozen=True)
class ProfilePoint:
    """One profiled limit.

    Attributes:
        limit_w: The grid's value (each GPU ran at it clamped into its own range).
        step_s: Wall seconds per step.
        energy_per_step_j: Every GPU's energy per step, summed.
        steps: Steps measured.
    """

    limit_w: float
    step_s: float
    energy_per_step_j: float
    steps: int


def limit_grid_w(gpus: Mapping[GpuKey, GpuRange], step_w: float) -> tuple[float, ...]:
    """The common grid, top down: the highest ``max_w`` down to the lowest ``min_w``."""
    top_w = max(r.max_w for r in gpus.values())
    bottom_w = min(r.min_w for r in gpus.values())
    grid = [top_w]
    while grid[-1] - step_w > bottom_w + 1e-6:
        grid.append(top_w - len(grid) * step_w)
    if grid[-1] > bottom_w + 1e-6:
        grid.append(bottom_w)
    return tuple(grid)


class OptimizeController:
    """Profiles the common grid top down, then keeps the best limit (see the module)."""

    def __init__(self, gpus: Mapping[GpuKey, GpuRange], settings: OptimizeSettings) -> None:
        if not gpus:
            raise ValueError("power policy optimize: no GPUs to control")
        for key, r in gpus.items():
            if not r.min_w <= r.default_w <= r.max_w:
                raise ValueError(f"power policy optimize: {key} has min/default/max {r}")
        self._gpus = dict(sorted(gpus.items()))
        self._settings = settings
        self._grid_w = limit_grid_w(self._gpus, settings.grid_step_w)
        self._max_power_w = sum(r.max_w for r in self._gpus.values())
        self._baseline: Window | None = None
        self._profile: list[ProfilePoint] = []
        self._chosen: ProfilePoint | None = None

    @property
    def baseline(self) -> Window | None:
        """The warm-up window at the default limits (None until measured)."""
        return self._baseline

    @property
    def profile(self) -> tuple[ProfilePoint, ...]:
        """The profiled limits so far, top down."""
        return tuple(self._profile)

    @property
    def chosen_w(self) -> float | None:
        """The grid value kept for the run (None before the choice)."""
        return None if self._chosen is None else self._chosen.limit_w

    @property
    def grid_w(self) -> tuple[float, ...]:
        """The common grid's values, top down."""
        return self._grid_w

    def start(self) -> Decision:
        """The warm-up window: every GPU at its default limit."""
        steps = self._settings.warmup_steps
        limits_w = {key: r.default_w for key, r in self._gpus.items()}
        reason = f"warm-up: every GPU at its default limit for {steps} steps"
        return Decision(limits_w, reason, steps)

    def observe(self, window: Window) -> Decision:
        """The window just measured (at the limits last decided) -> the next window."""
        measured = f"{window.step_s:.3f} s/step, {window.energy_per_step_j:.0f} J/step"
        if self._chosen is not None:
            return self._settled(f"keeping {_w(self._chosen.limit_w)} (chosen): {measured}")
        if self._baseline is None:
            self._baseline = window
            return self._profile_next(f"warm-up at the default limits gave {measured}")
        limit_w = self._grid_w[len(self._profile)]
        self._profile.append(
            ProfilePoint(limit_w, window.step_s, window.energy_per_step_j, window.steps)
        )
        stopped = self._stopped_early()
        if stopped or len(self._profile) == len(self._grid_w):
            return self._choose(stopped)
        return self._profile_next(f"{_w(limit_w)} gave {measured}")

    def _profile_next(self, last: str) -> Decision:
        index = len(self._profile)
        limit_w = self._grid_w[index]
        reason = f"profiling {_w(limit_w)} ({index + 1} of {len(self._grid_w)}); {last}"
        return Decision(self._limits_w(limit_w), reason, self._settings.steps_per_limit)

    def _settled(self, reason: str) -> Decision:
        assert self._chosen is not None
        return Decision(self._limits_w(self._chosen.limit_w), reason, SETTLED_STEPS, True)

    def _limits_w(self, grid_w: float) -> dict[GpuKey, float]:
        return {key: r.clamp(grid_w) for key, r in self._gpus.items()}

    def _fastest_s(self) -> float:
        """The least step time measured, the baseline's too if it ran at the top."""
        times = [p.step_s for p in self._profile]
        if self._baseline is not None and all(
            r.default_w == r.clamp(self._grid_w[0]) for r in self._gpus.values()
        ):
            times.append(self._baseline.step_s)
        return min(times)

    def _bound_s(self) -> float:
        return (1.0 + self._settings.max_slowdown) * self._fastest_s()

    def _stopped_early(self) -> bool:
        """Slowdown mode: the last two limits were both over the bound."""
        if self._settings.eta is not None or len(self._profile) < 2:
            return False
        return all(p.step_s > self._bound_s() for p in self._profile[-2:])

    def _choose(self, stopped: bool) -> Decision:
        eta = self._settings.eta
        if eta is None:
            bound_s = self._bound_s()
            within = [p for p in self._profile if p.step_s <= bound_s]
            # Noise may put every limit over a baseline's bound: then the fastest.
            candidates = within or [min(self._profile, key=lambda p: p.step_s)]
            chosen = min(candidates, key=lambda p: p.energy_per_step_j)
            limit = f" (limit {self._settings.max_slowdown:.0%})"
        else:
            chosen = min(self._profile, key=lambda p: self._cost(p, eta))
            limit = f" (eta {eta:g})"
        self._chosen = chosen
        top = self._profile[0]
        if chosen is top:
            reason = f"chose {_w(chosen.limit_w)}, the top limit: no lower one did better{limit}"
        else:
            energy = _change(chosen.energy_per_step_j, top.energy_per_step_j, "less", "more")
            time = _change(chosen.step_s, top.step_s, "faster", "slower")
            reason = (
                f"chose {_w(chosen.limit_w)}: {energy} energy per step than "
                f"{_w(top.limit_w)}, {time}{limit}"
            )
        if stopped:
            reason += f"; stopped at {_w(self._profile[-1].limit_w)} (2 limits too slow)"
        return self._settled(reason)

    def _cost(self, point: ProfilePoint, eta: float) -> float:
        """Zeus's cost of a step: energy and time, weighed by ``eta``."""
        return eta * point.energy_per_step_j + (1 - eta) * self._max_power_w * point.step_s


def _w(watts: float) -> str:
    return f"{watts:.0f} W"


def _change(new: float, old: float, less: str, more: str) -> str:
    """``new`` against ``old`` in percent: '14.2% less' or '3.1% more'."""
    fraction = new / old - 1.0 if old > 0 else 0.0
    return f"{abs(fraction):.1%} {less if fraction < 0 else more}"
