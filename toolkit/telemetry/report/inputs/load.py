"""Read a run directory (docs/telemetry.md) into typed data, touching nothing.

Samples are not read here: ``RunData`` names each node's trace files and how many
samples they hold, and the report reads one node's samples at a time
(``series.read_series``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import ReportError, RtkError, RunDirError
from toolkit.rundir import Manifest, MetricsLine, NodeManifest, RunDir, read_metrics
from toolkit.stall.records import read_stalls
from toolkit.telemetry.report.inputs.series import SampleSpan, sample_span

__all__ = ["HOW_TO_RECORD", "Manifest", "NodeManifest", "RunData", "load_run"]

HOW_TO_RECORD = "record one with `rtk train ... --telemetry`"


@dataclass(frozen=True)
class RunData:
    """Everything a report reads from a run directory, as written.

    Attributes:
        run_dir: The run directory.
        manifest: The telemetry manifest.
        traces: Node -> its trace files in order (every manifest node, and any node
            with traces but no manifest entry).
        spans: Node -> how many samples it has, first and last (head timeline).
        marker_files: Every rank's marker file (read by ``markers.reduce_markers``).
        metrics: ``metrics.jsonl`` lines, one per step (the last line of a step wins),
            sorted by step; lines that are not a step's are skipped.
        notes: What was odd about the input (skipped lines, missing files).
        stalls_declared_s: When the watchdog declared each stall (``stall.json``).
    """

    run_dir: Path
    manifest: Manifest
    traces: dict[str, list[Path]]
    spans: dict[str, SampleSpan]
    marker_files: list[Path]
    metrics: list[MetricsLine]
    notes: list[str]
    stalls_declared_s: list[float] = field(default_factory=list)


def load_run(run_dir: Path) -> RunData:
    """Read the manifest, the markers and the metrics; find every node's traces.

    ``run_dir`` may also be the run's ``report`` directory.

    Raises:
        ReportError: No run directory, no manifest, or not one sample in it.
        toolkit.errors.RunDirError: The manifest is unreadable or not a manifest.
    """
    layout = RunDir.find(run_dir)
    run_dir = layout.root
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir}: no such run directory")
    notes: list[str] = []
    manifest = _read_manifest(layout, notes)
    traces = _find_traces(layout, manifest, notes)
    spans = {
        name: sample_span(files, manifest.nodes[name].offset_s) for name, files in traces.items()
    }
    if not any(span.samples for span in spans.values()):
        where = layout.nodes_dir
        states = ", ".join(f"{n.name} {n.status}" for n in manifest.nodes.values()) or "none"
        raise ReportError(
            f"{run_dir}: no telemetry samples in {where}/*/trace-*.arrows (nodes: {states}); "
            f"the samplers recorded nothing (see `error` in telemetry/manifest.json), "
            f"{HOW_TO_RECORD}"
        )
    markers = layout.marker_files()
    if not markers:
        notes.append("no markers (markers/rank-*.jsonl): no step, barrier or phase figures")
    metrics = _read_metrics(layout, notes)
    try:
        stalls = [stall.detected_wall_s for stall in read_stalls(layout.stall)]
    except RtkError as e:
        notes.append(f"stall.json not read: {e}")
        stalls = []
    return RunData(run_dir, manifest, traces, spans, markers, metrics, notes, stalls)


def _read_manifest(layout: RunDir, notes: list[str]) -> Manifest:
    path = layout.manifest
    if not path.is_file():
        raise ReportError(
            f"{layout.root}: no telemetry/manifest.json, so this run has no power telemetry; "
            f"{HOW_TO_RECORD}"
        )
    manifest = Manifest.read(path)
    notes.extend(manifest.notes)
    return manifest


def _find_traces(layout: RunDir, manifest: Manifest, notes: list[str]) -> dict[str, list[Path]]:
    nodes_dir = layout.nodes_dir
    names = list(manifest.nodes)
    if nodes_dir.is_dir():
        extra = sorted(p.name for p in nodes_dir.iterdir() if p.is_dir() and p.name not in names)
        for name in extra:
            notes.append(f"node {name}: samples without a manifest entry; clock offset 0 s assumed")
            manifest.nodes[name] = NodeManifest.unlisted(name)
        names += extra
    return {name: layout.node_traces(name) for name in names}


def _read_metrics(layout: RunDir, notes: list[str]) -> list[MetricsLine]:
    path = layout.metrics
    if not path.is_file():
        notes.append("no metrics.jsonl: token figures come from the markers, if any")
        return []
    by_step: dict[int, MetricsLine] = {}
    for line in read_metrics(path):
        if not isinstance(line, RunDirError):
            by_step[line.step] = line
    return [by_step[step] for step in sorted(by_step)]
