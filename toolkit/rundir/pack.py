"""What rtk brings back from a run directory (never checkpoints, which can be huge).

The node agent, which runs on the nodes without rtk installed, gets the list on its
command line (``toolkit.cluster.plan.ClusterPlan.pack_command``).
"""

from __future__ import annotations

# Globs relative to the run directory.
PACK_PATTERNS = (
    "telemetry/**/*",
    "markers/*.jsonl",
    "stacks/*.txt",
    "metrics*.jsonl",
    "power.jsonl",
    "*.json",
)
