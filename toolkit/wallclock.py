"""The wall clock rtk stamps its samples and markers with.

``time.time()``, shifted by ``RTK_CLOCK_SKEW_S`` seconds in a process where that
variable is set. Nodes of a real cluster each keep their own clock, and the report
corrects their offsets (``toolkit/telemetry/clock.py``); nodes that share one machine's
clock (network namespaces, containers on one host) have none to correct, so the
correction could never be seen at work. Setting the variable in one node's environment
(the inventory's per-node ``env:``) makes that node's samples, markers and answers to
the clock-offset estimate run ahead (or behind) as a skewed clock would. Nothing else
reads it: preflight's clock check measures the real clock.
"""

from __future__ import annotations

import math
import os
import time

SKEW_VARIABLE = "RTK_CLOCK_SKEW_S"


def skew_s() -> float:
    """The skew this process applies (0 when the variable is unset or not a number)."""
    try:
        value = float(os.environ.get(SKEW_VARIABLE, "0") or 0)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) else 0.0


_SKEW_S = skew_s()


def wall_s() -> float:
    """``time.time()`` plus this process's skew."""
    return time.time() + _SKEW_S
