"""When a run has stalled: no rank has finished a step for longer than expected.

``StallDetector`` is fed progress (``step_done``) and the start of phases (``phase``)
by the job driver as it reads the ranks' markers, and asked ``check(now_s)`` about
once a second. It never reads a clock: every call says what time it is, so the same
calls give the same answers (tests replay a run of hours in microseconds).

The timeout in force (``timeout_s``):

- before the run has a learned step time (the first step, which includes compilation,
  data loading and NCCL's set-up, and the second, the first one timed): the start-up
  timeout;
- then the user's fixed timeout when one was given (``--stall-timeout-s``), else a
  learned one: ``max(floor_s, MEDIAN_MULTIPLE x the median of the recent steps,
  LONGEST_MULTIPLE x the longest recent step)``, so a run that checkpoints every few
  steps (steps ten times longer) has seen such a step and waits past it;
- while a rank is in a phase that makes a step long (``LONG_PHASES``: checkpoint,
  save, eval, validation), that timeout times ``LONG_PHASE_MULTIPLE``, until the next
  progress.

A stall is declared once: ``check`` then answers None until progress resumes
(``step_done`` says how long the stall lasted), and a later stall is declared anew.
The step that ended a declared stall is not learned as a step time.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

# Before the run's step time is known (the first two steps): the first step compiles
# (torch.compile can take minutes), loads the first batches and sets up NCCL's
# communicators, the second often still warms up. Ten minutes, NCCL's own default.
STARTUP_TIMEOUT_S = 600.0
# The learned timeout never goes below this. c10d's NCCL process group times a stuck
# collective out after 10 min by default (gloo after 30 min) and then tears the ranks
# down, stacks and all: the watchdog must fire, and collect, well before that. A minute
# leaves nine for collecting evidence, and is longer than the pauses a healthy run
# makes unannounced (a garbage collection, a slow log write, a shared filesystem's
# hiccup), so these are not declared.
FLOOR_S = 60.0
# A step ten times slower than the median is not noise: at 1 s steps the floor rules,
# at 30 s steps this gives 5 min, still half of NCCL's 10.
MEDIAN_MULTIPLE = 10.0
# A step as long as twice the longest one seen recently is not expected either; steps
# that are long on purpose (a checkpoint every N steps) are covered once one was seen.
LONGEST_MULTIPLE = 2.0
# How many recent step times the median is taken over (memory and cost are bounded by
# it, whatever the run's length).
MEDIAN_WINDOW = 100
# How many recent step times the longest is taken over: longer, so a checkpoint every
# few hundred steps is still remembered when the next one comes.
LONGEST_WINDOW = 1000
# Phases that make the step they are in longer than usual, matched as parts of the
# phase's name, any case (``checkpoint``, ``save_model``, ``eval``, ``validation``).
LONG_PHASES = ("checkpoint", "ckpt", "save", "eval", "valid")
# A checkpoint or an evaluation is often 10x a training step, first time included:
# while one is in progress the timeout in force is multiplied by this.
LONG_PHASE_MULTIPLE = 10.0


def is_long_phase(name: str) -> bool:
    """True when a phase named ``name`` makes a step longer (see ``LONG_PHASES``)."""
    lowered = name.lower()
    return any(word in lowered for word in LONG_PHASES)


@dataclass(frozen=True)
class Stall:
    """A stall, as declared.

    Attributes:
        step: The last step any rank finished (None: none yet).
        stalled_s: How long no rank had finished a step when it was declared.
        timeout_s: The timeout in force then.
    """

    step: int | None
    stalled_s: float
    timeout_s: float


class StallDetector:
    """Declares a stall when no rank has finished a step for longer than the timeout.

    Args:
        started_s: When the run started (the wait for its first step begins).
        timeout_s: A fixed timeout after start-up (None: learned from the steps).
        startup_timeout_s: The timeout until the step time is known.
        floor_s: The least learned timeout.

    Raises:
        ValueError: A timeout that is not positive.
    """

    def __init__(
        self,
        started_s: float,
        timeout_s: float | None = None,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        floor_s: float = FLOOR_S,
    ) -> None:
        for name, value in (
            ("timeout_s", timeout_s),
            ("startup_timeout_s", startup_timeout_s),
            ("floor_s", floor_s),
        ):
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        self._fixed_s = timeout_s
        self._startup_s = startup_timeout_s
        self._floor_s = floor_s
        self._step: int | None = None  # the last step any rank finished
        self._progress_s = started_s  # when the wait for the next step began
        self._steps_seen = 0  # progress events so far
        self._long_phase = False  # a rank is in a long phase since the last progress
        self._declared = False  # a stall was declared and progress has not resumed
        # The recent step times: in arrival order, sorted (for the median), and the
        # candidates for the longest (a decreasing deque of (index, duration)).
        self._recent: deque[float] = deque()
        self._sorted: list[float] = []
        self._longest: deque[tuple[int, float]] = deque()

    @property
    def step(self) -> int | None:
        """The last step any rank finished (None: none yet)."""
        return self._step

    @property
    def expected_step_s(self) -> float | None:
        """The median of the recent step times (None: none timed yet)."""
        values = self._sorted
        if not values:
            return None
        middle = len(values) // 2
        if len(values) % 2:
            return values[middle]
        return (values[middle - 1] + values[middle]) / 2

    @property
    def timeout_s(self) -> float:
        """The timeout in force now (see the module's docstring)."""
        median = self.expected_step_s
        if median is None:
            timeout = self._startup_s
        elif self._fixed_s is not None:
            timeout = self._fixed_s
        else:
            longest = self._longest[0][1]
            timeout = max(self._floor_s, MEDIAN_MULTIPLE * median, LONGEST_MULTIPLE * longest)
        return timeout * LONG_PHASE_MULTIPLE if self._long_phase else timeout

    def step_done(self, step: int, now_s: float) -> float | None:
        """A rank finished ``step`` at ``now_s``; only a step past the last one is progress.

        Feed a rank's events in the order it wrote them (its ``phase`` after the step
        it follows); ranks may interleave. Pass the marker's own time when there is
        one: events read in batches at one time split the batch's interval over its
        steps.

        Returns:
            When this ended a declared stall, how long no step had been finished (for
            "resumed after 95 s"); else None.
        """
        if self._step is not None and step <= self._step:
            return None
        now_s = max(now_s, self._progress_s)  # another node's clock may be behind
        # Not learned: the first step's time (the start-up's, not a step's), and a
        # declared stall's (else the next stall would wait for twice as long).
        if self._step is not None and not self._declared:
            self._add_duration((now_s - self._progress_s) / (step - self._step))
        self._steps_seen += 1
        resumed_s = now_s - self._progress_s if self._declared else None
        self._step, self._progress_s = step, now_s
        self._long_phase = self._declared = False
        return resumed_s

    def phase(self, name: str, now_s: float, step: int | None = None) -> None:
        """A rank began phase ``name`` of ``step`` at ``now_s``; a long one extends the wait.

        A phase of a step before the last one finished is a rank behind the others
        (its file read after theirs): the run has moved past it, and it extends nothing.
        Else one checkpoint read late would give the next wait ten times its timeout.
        """
        del now_s  # the phase lasts until the next progress, whenever it began
        if step is not None and self._step is not None and step < self._step:
            return
        if is_long_phase(name):
            self._long_phase = True

    def nearing(self, now_s: float, fraction: float = 0.5) -> bool:
        """Whether no step has come for more than ``fraction`` of the timeout.

        Not after a stall is declared: this is the moment to make ready what a stall
        will need.
        """
        return not self._declared and now_s - self._progress_s > fraction * self.timeout_s

    def check(self, now_s: float) -> Stall | None:
        """The stall, the first time no step has been finished for longer than the timeout.

        After that, None until progress resumes (``step_done``).
        """
        if self._declared:
            return None
        waited_s = now_s - self._progress_s
        timeout = self.timeout_s
        if waited_s <= timeout:
            return None
        self._declared = True
        return Stall(step=self._step, stalled_s=waited_s, timeout_s=timeout)

    def _add_duration(self, duration_s: float) -> None:
        """Keep one step time in the windows (O(MEDIAN_WINDOW) at most, no growth)."""
        index = self._steps_seen
        self._recent.append(duration_s)
        bisect.insort(self._sorted, duration_s)
        if len(self._recent) > MEDIAN_WINDOW:
            old = self._recent.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]
        longest = self._longest
        while longest and longest[-1][1] <= duration_s:
            longest.pop()
        longest.append((index, duration_s))
        while longest[0][0] <= index - LONGEST_WINDOW:
            longest.popleft()
