"""The stages that go through Ray: rtk's own commands on a one-node cluster of this machine.

``ray-up`` (``rtk up --local``) first, then preflight with its load test, training per
strategy, MFU at 350M compiled, telemetry around a plain PyTorch script, a power-limit
sweep, and ``ray-down`` last (the runner runs it whatever happened before). Where Ray
does not import, each is skipped as ``Ray not importable``. ``common.py`` holds the
command lines and how they run; ``figures.py`` reads their outputs (pure functions).
Each stage module lists the command lines it runs (``commands``), so the CPU mode and
``--dry-run`` show them.
"""

from __future__ import annotations
