"""The power policy a user chose for a run (no Ray, no NVML here).

``--power-policy``, ``--max-slowdown`` and ``--eta`` of ``rtk train``, ``rtk torchrun``
and ``rtk telemetry record`` become a ``PowerSettings`` in the job's configuration; the
job driver's ``toolkit.power.driver`` reads it. Kept apart so the CLI can build it
without importing Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from toolkit.json_types import JsonObject

MEASURE, OPTIMIZE, STRAGGLERS = "measure", "optimize", "stragglers"
POLICIES = (MEASURE, OPTIMIZE, STRAGGLERS)
MAX_SLOWDOWN = 0.05  # Zeus's and Perseus's usual bound: 5% longer steps at most
WARMUP_STEPS = 10  # not judged: compilation, allocator warm-up, the first NCCL rings
STEPS_PER_LIMIT = 5  # optimize: each grid limit is held this many steps
STEPS_PER_WINDOW = 10  # stragglers: each adjustment is judged over this many
GRID_STEP_W = 25.0  # watts between two limits tried (Zeus's default step)


@dataclass(frozen=True)
class PowerSettings:
    """How a run's GPU power limits are chosen while it goes.

    Attributes:
        policy: One of ``POLICIES``: ``measure`` (change nothing), ``optimize`` (profile
            a grid of limits after the warm-up, keep the best) or ``stragglers`` (lower
            the limits of GPUs that wait for the slowest).
        max_slowdown: The longest steps may get, as a share of the fastest (optimize)
            or of the first steps (stragglers).
        eta: With optimize: Zeus's cost ``eta * energy + (1 - eta) * max_power * time``
            is minimised instead of energy within ``max_slowdown`` (None: not used).
        warmup_steps: Steps at the default limits before anything is judged.
        steps_per_limit: Steps each limit is held while optimize profiles.
        steps_per_window: Steps each stragglers adjustment is judged over.
        grid_step_w: Watts between two limits tried.
    """

    policy: str = MEASURE
    max_slowdown: float = MAX_SLOWDOWN
    eta: float | None = None
    warmup_steps: int = WARMUP_STEPS
    steps_per_limit: int = STEPS_PER_LIMIT
    steps_per_window: int = STEPS_PER_WINDOW
    grid_step_w: float = GRID_STEP_W

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"--power-policy {self.policy}: choose {', '.join(POLICIES)}")
        if not 0 <= self.max_slowdown < 1:
            raise ValueError(
                f"--max-slowdown {self.max_slowdown!r}: give a share of the step time in "
                "[0, 1), e.g. 0.05 for 5%"
            )
        if self.eta is not None and not 0 <= self.eta <= 1:
            raise ValueError(f"--eta {self.eta!r}: give a weight in [0, 1]")
        if self.eta is not None and self.policy != OPTIMIZE:
            raise ValueError("--eta weighs optimize's choice: add --power-policy optimize")
        for name in ("warmup_steps", "steps_per_limit", "steps_per_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        if not self.grid_step_w > 0:
            raise ValueError(f"grid_step_w must be positive, got {self.grid_step_w!r}")

    @property
    def acts(self) -> bool:
        """True when the policy changes power limits (not ``measure``)."""
        return self.policy != MEASURE

    def to_json(self) -> JsonObject:
        """A JSON-ready object (part of a job's configuration)."""
        return {
            "policy": self.policy,
            "max_slowdown": self.max_slowdown,
            "eta": self.eta,
            "warmup_steps": self.warmup_steps,
            "steps_per_limit": self.steps_per_limit,
            "steps_per_window": self.steps_per_window,
            "grid_step_w": self.grid_step_w,
        }

    @classmethod
    def from_json(cls, data: object) -> PowerSettings:
        """The inverse of ``to_json`` (missing keys: the defaults).

        Raises:
            ValueError: Not an object, a key of the wrong type, or a value out of range.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"power settings: expected an object, got {data!r}")
        try:
            eta = data.get("eta")
            return cls(
                policy=str(data.get("policy", MEASURE)),
                max_slowdown=float(data.get("max_slowdown", MAX_SLOWDOWN)),
                eta=None if eta is None else float(eta),
                warmup_steps=int(data.get("warmup_steps", WARMUP_STEPS)),
                steps_per_limit=int(data.get("steps_per_limit", STEPS_PER_LIMIT)),
                steps_per_window=int(data.get("steps_per_window", STEPS_PER_WINDOW)),
                grid_step_w=float(data.get("grid_step_w", GRID_STEP_W)),
            )
        except (TypeError, ValueError) as e:
            raise ValueError(f"power settings: {e}") from e
