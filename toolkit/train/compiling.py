"""``torch.compile`` for the trainer: compiling in place, and timing the compiles.

Modules are compiled in place (``nn.Module.compile``), so their parameter names, and
with them every checkpoint, are the same compiled or not: a run may resume with the
other ``--compile``. Where each strategy compiles is in ``strategies.py``.

Compilation happens lazily, inside the first steps (the forward on its first call,
the backward on its first run), and again whenever a guard fails. ``CompileClock``
tells the loop how much of each step was compilation, from torch's own count of the
seconds spent compiling in this process.
"""

from __future__ import annotations

import logging

from torch import nn

log = logging.getLogger(__name__)


def compile_in_place(module: nn.Module, backend: str) -> None:
    """Compile ``module``'s forward (with its hooks) on its next call."""
    module.compile(backend=backend)


def compile_seconds() -> float | None:
    """Seconds this process has spent compiling so far; None when torch does not say.

    Dynamo adds up its frame compiles and the backward's compiles (``total_wall_time``
    of ``torch._dynamo.utils.calculate_time_spent``, a private helper that
    ``TORCH_LOGS`` uses too).
    """
    try:
        from torch._dynamo.utils import calculate_time_spent

        return float(calculate_time_spent()["total_wall_time"])
    except (ImportError, KeyError, TypeError, ValueError):
        return None


class CompileClock:
    """How long each step spent compiling, for ``MetricsLine.compile_s``."""

    def __init__(self, compiled: bool) -> None:
        """A clock for a model that is ``compiled`` (an eager model never compiles)."""
        self.compiled = compiled
        self.last_s = compile_seconds() if compiled else None
        if compiled and self.last_s is None:
            log.warning("this torch keeps no compile time: the first step counts as compiling")

    def step(self, step_time_s: float, first: bool) -> float | None:
        """Seconds spent compiling since the last call (None: none); call after each step.

        ``first`` is the attempt's first step: without torch's clock, that step (all
        of it) counts as the compile.
        """
        if not self.compiled:
            return None
        if self.last_s is None:
            return step_time_s if first else None
        now_s = compile_seconds()
        spent_s = (now_s or 0.0) - self.last_s
        self.last_s = now_s if now_s is not None else self.last_s
        return spent_s if spent_s > 0 else None
