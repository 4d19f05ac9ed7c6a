"""The run directory: its layout (``RunDir``) and its typed records.

The one owner of what a run directory holds, shared by whoever writes a file and
whoever reads it: the trainer, the telemetry session, the report, the sweep runner,
preflight and (through ``pack.PACK_PATTERNS``) the node agent. A low layer: it imports
only the standard library, ``toolkit.errors``, ``toolkit.fields`` and
``toolkit.json_types``.
"""

from __future__ import annotations

from toolkit.rundir.allocations import (
    AllocationRecord,
    TrainingProgress,
    read_allocations,
    training_progress,
)
from toolkit.rundir.layout import RunDir
from toolkit.rundir.markers import Marker, MarkerWriter, marker_path, read_markers
from toolkit.rundir.preflight import Check, PreflightRecord
from toolkit.rundir.records import (
    CommandRecord,
    IdleBaseline,
    IdleCooldown,
    IdleRecord,
    ProfileRunRecord,
)
from toolkit.rundir.summary import RunSummary, read_run_summary
from toolkit.rundir.telemetry import Manifest, NodeManifest
from toolkit.rundir.train import (
    MetricsLine,
    ThroughputSums,
    TrainConfigRecord,
    TrainThroughput,
    metrics_step,
    read_metrics,
)

__all__ = [
    "AllocationRecord",
    "Check",
    "CommandRecord",
    "IdleBaseline",
    "IdleCooldown",
    "IdleRecord",
    "Manifest",
    "Marker",
    "MarkerWriter",
    "MetricsLine",
    "NodeManifest",
    "PreflightRecord",
    "ProfileRunRecord",
    "RunDir",
    "RunSummary",
    "ThroughputSums",
    "TrainConfigRecord",
    "TrainThroughput",
    "TrainingProgress",
    "marker_path",
    "metrics_step",
    "read_allocations",
    "read_markers",
    "read_metrics",
    "read_run_summary",
    "training_progress",
]
