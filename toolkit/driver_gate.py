"""A local driver started before its cluster is up, held at a gate until it is.

Starting the training driver takes seconds of imports (torch, Ray, Ray Train: about
3.5 s on a 2-core machine) before it first speaks to Ray. ``rtk train --up`` starts it
as soon as the head has its env file, while Ray still starts on the nodes, with
``GATE_VARIABLE=GATE_STDIN`` in its environment. The driver imports what it needs,
then reads one line from stdin before it touches anything: ``GO_LINE`` once the
cluster is up (and checked), or end of input when rtk gave up on the bring-up (or
died), and the driver then exits without running. Only entrypoints that call
``gate_passed`` honour the gate (``toolkit.train.job``); stdlib only, as the driver
imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TextIO

GATE_VARIABLE = "RTK_DRIVER_GATE"
GATE_STDIN = "stdin"
GO_LINE = "go\n"


def gate_passed(environ: Mapping[str, str], stdin: TextIO) -> bool:
    """True when the driver may run: no gate, or ``GO_LINE`` read from ``stdin``.

    Anything other than ``GO_LINE`` (end of input, most likely) is False: the driver
    was started ahead and is not wanted after all.
    """
    if environ.get(GATE_VARIABLE) != GATE_STDIN:
        return True
    return stdin.readline() == GO_LINE
