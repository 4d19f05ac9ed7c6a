"""What rtk brings back from a run directory (never checkpoints, which can be huge).

Standard library only and nothing else in this file: the node agent, which runs on
the nodes without rtk installed, carries a copy of ``PACK_PATTERNS`` that a test
keeps equal to this one.
"""

from __future__ import annotations

# Globs relative to the run directory.
PACK_PATTERNS = (
    "telemetry/**/*",
    "markers/*.jsonl",
    "metrics*.jsonl",
    "*.json",
)
