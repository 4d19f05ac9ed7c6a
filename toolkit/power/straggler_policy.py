"""``--power-policy stragglers``: lower the limits of the GPUs that wait for the slowest.

Perseus-like, per GPU: in a step of a data-parallel run every rank waits at the step's
collective for the slowest one, so a GPU that waits can run slower (at a lower limit)
for no loss of time and less energy. After a warm-up at the default limits, the first
judged window (still at the defaults) gives the baseline step time. In each window the
GPU that waited least (the slowest rank; ties: all of them) keeps its limit for good; a
GPU that waited at least ``min_wait_share`` of the step is lowered by ``grid_step_w``
(never below its ``min_w``); a GPU that waited less (or whose wait was not measured)
stops being lowered. When a window is more than ``max_slowdown`` slower than the
baseline, the GPUs lowered at the last change go back up one step and stay there: a
slowdown beyond the bound lasts one window. Once no GPU would change, the controller
is settled and keeps the limits.

Pure: the same windows give the same decisions (a restarted driver replays them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from toolkit.power.optimize import SETTLED_STEPS, check_setting
from toolkit.power.windows import Decision, GpuKey, GpuRange, Window

# GPUs named in a reason; the others are counted.
NAMED_GPUS = 3


@dataclass(frozen=True)
class StragglerSettings:
    """How the stragglers policy lowers the waiting GPUs.

    Attributes:
        max_slowdown: The most a step may be slower than at the start (0.05: 5%).
        warmup_steps: Steps of the warm-up window at the default limits.
        steps_per_window: Steps of each judged window.
        grid_step_w: Watts a waiting GPU's limit is lowered by per window.
        min_wait_share: The least wait, as a share of the step, that lowers a GPU.
    """

    max_slowdown: float = 0.05
    warmup_steps: int = 10
    steps_per_window: int = 10
    grid_step_w: float = 25.0
    min_wait_share: float = 0.05

    def __post_init__(self) -> None:
        check_setting("max_slowdown", self.max_slowdown, 0.0, 1.0, "0 <= max_slowdown <= 1")
        check_setting("warmup_steps", self.warmup_steps, 1, None, "an integer >= 1")
        check_setting("steps_per_window", self.steps_per_window, 1, None, "an integer >= 1")
        check_setting("grid_step_w", self.grid_step_w, 1.0, None, "grid_step_w >= 1 W")
        check_setting("min_wait_share", self.min_wait_share, 0.0, 1.0, "0 <= min_wait_share <= 1")


class StragglerController:
    """Lowers the waiting GPUs' limits window by window (see the module)."""

    def __init__(self, gpus: Mapping[GpuKey, GpuRange], settings: StragglerSettings) -> None:
        if not gpus:
            raise ValueError("power policy stragglers: no GPUs to control")
        for key, r in gpus.items():
            if not r.min_w <= r.default_w <= r.max_w:
                raise ValueError(f"power policy stragglers: {key} has min/default/max {r}")
        self._gpus = dict(sorted(gpus.items()))
        self._settings = settings
        self._limits_w = {key: r.default_w for key, r in self._gpus.items()}
        # GPUs never lowered again: the slowest, those that stopped waiting, the raised.
        self._kept: set[GpuKey] = set()
        self._done: set[GpuKey] = set()
        self._frozen: set[GpuKey] = set()
        # The GPUs lowered by the last decision, with their limits before it.
        self._lowered_from_w: dict[GpuKey, float] = {}
        self._warmed_up = False
        self._baseline: Window | None = None
        self._settled = False

    @property
    def baseline(self) -> Window | None:
        """The first judged window, every GPU at its default limit (None until then)."""
        return self._baseline

    @property
    def limits_w(self) -> Mapping[GpuKey, float]:
        """Each GPU's limit now."""
        return dict(self._limits_w)

    def start(self) -> Decision:
        """The warm-up window: every GPU at its default limit."""
        steps = self._settings.warmup_steps
        reason = f"warm-up: every GPU at its default limit for {steps} steps"
        return Decision(dict(self._limits_w), reason, steps)

    def observe(self, window: Window) -> Decision:
        """The window just measured (at the limits last decided) -> the next window."""
        if not self._warmed_up:
            self._warmed_up = True
            return self._decide("warm-up done; measuring the step at the default limits")
        if self._settled:
            return self._decide(f"keeping the limits: {self._summary(window)}")
        if self._baseline is None:
            self._baseline = window
        bound_s = (1.0 + self._settings.max_slowdown) * self._baseline.step_s
        if window.step_s > bound_s:
            reason = self._raise_back(window)
        else:
            reason = self._lower_waiting(window)
        if not self._lowered_from_w and self._still_lowering() == []:
            self._settled = True
        return self._decide(reason)

    def _decide(self, reason: str) -> Decision:
        steps = SETTLED_STEPS if self._settled else self._settings.steps_per_window
        return Decision(dict(self._limits_w), reason, steps, self._settled)

    def _still_lowering(self) -> list[GpuKey]:
        stopped = self._kept | self._done | self._frozen
        return [k for k in self._gpus if k not in stopped]

    def _slower(self, window: Window) -> str:
        assert self._baseline is not None
        fraction = window.step_s / self._baseline.step_s - 1.0
        return f"{abs(fraction):.1%} {'faster' if fraction < 0 else 'slower'} than at the start"

    def _raise_back(self, window: Window) -> str:
        """The guardrail: undo the last lowering and freeze those GPUs."""
        raised = list(self._lowered_from_w)
        if not raised:
            return f"step {self._slower(window)}, with no lowering to undo: keeping the limits"
        for key, before_w in self._lowered_from_w.items():
            self._limits_w[key] = before_w
        self._frozen.update(raised)
        self._lowered_from_w = {}
        to_w = _watts(self._limits_w[k] for k in raised)
        return (
            f"step {self._slower(window)}: raised {_gpus(raised)} back to {to_w}"
            " and keep them there"
        )

    def _lower_waiting(self, window: Window) -> str:
        """Keep the slowest, stop the GPUs that no longer wait, lower the others."""
        self._lowered_from_w = {}
        waits_s = {k: window.wait_s[k] for k in self._gpus if k in window.wait_s}
        least_s = min(waits_s.values(), default=0.0)
        slowest = [k for k, wait_s in waits_s.items() if wait_s <= least_s]
        self._kept.update(slowest)
        share_s = self._settings.min_wait_share * window.step_s
        shares: list[float] = []
        for key in self._still_lowering():
            wait_s = waits_s.get(key, 0.0)
            limit_w = self._limits_w[key]
            floor_w = self._gpus[key].min_w
            if wait_s < share_s or limit_w <= floor_w:
                self._done.add(key)
                continue
            self._lowered_from_w[key] = limit_w
            self._limits_w[key] = max(floor_w, limit_w - self._settings.grid_step_w)
            shares.append(wait_s / window.step_s)
        keeps = "no wait measured"
        if slowest:
            keeps = f"{_gpus(slowest)} {'keeps' if len(slowest) == 1 else 'keep'}"
            keeps += f" {_watts(self._limits_w[k] for k in slowest)} (the slowest)"
        lowered = list(self._lowered_from_w)
        if not lowered:
            return f"no GPU waits {self._settings.min_wait_share:.0%} of a step now; {keeps}"
        waited = _range(f"{share * 100:.0f}" for share in sorted(shares)) + "%"
        count = f"{len(lowered)} waiting GPU{'s' if len(lowered) > 1 else ''}"
        to_w = _watts(self._limits_w[k] for k in lowered)
        return f"lowered {count} to {to_w} (they waited {waited} of each step); {keeps}"

    def _summary(self, window: Window) -> str:
        lowered = [k for k, r in self._gpus.items() if self._limits_w[k] < r.default_w]
        energy = f"{window.step_s:.3f} s/step, {window.energy_per_step_j:.0f} J/step"
        if not lowered:
            return f"none lowered; {energy}"
        return f"{len(lowered)} GPUs at {_watts(self._limits_w[k] for k in lowered)}; {energy}"


def _gpus(keys: list[GpuKey]) -> str:
    """A few GPUs by name, the rest counted: 'node1/gpu0, node1/gpu1 and 5 more'."""
    if not keys:
        return "no GPU"
    named = ", ".join(str(k) for k in keys[:NAMED_GPUS])
    rest = len(keys) - NAMED_GPUS
    return named if rest <= 0 else f"{named} and {rest} more"


def _watts(values_w: Iterable[float]) -> str:
    return _range(f"{w:.0f}" for w in sorted(set(values_w))) + " W"


def _range(texts: Iterable[str]) -> str:
    """'650' or '600-650' (first and last of the texts, in their order)."""
    items = list(texts)
    if not items:
        return "-"
    lowest, highest = items[0], items[-1]
    return lowest if lowest == highest else f"{lowest}-{highest}"
