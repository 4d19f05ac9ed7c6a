"""Read a run directory (docs/telemetry.md) into typed data, touching nothing."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import RunDirError
from toolkit.rundir import Manifest, MetricsLine, NodeManifest, RunDir, read_markers, read_metrics
from toolkit.telemetry.report.errors import ReportError

__all__ = ["HOW_TO_RECORD", "Manifest", "NodeManifest", "RunData", "load_run"]

HOW_TO_RECORD = "record one with `rtk train ... --telemetry`"


@dataclass(frozen=True)
class RunData:
    """Everything a report reads from a run directory, as written.

    Attributes:
        run_dir: The run directory.
        manifest: The telemetry manifest.
        samples: Node -> its sample records in file order (unreadable lines dropped).
        markers: Every rank's marker records, in file order per rank.
        metrics: ``metrics.jsonl`` lines, one per step (the last line of a step wins),
            sorted by step; lines that are not a step's are skipped.
        notes: What was odd about the input (skipped lines, missing files).
    """

    run_dir: Path
    manifest: Manifest
    samples: dict[str, list[dict[str, Any]]]
    markers: list[dict[str, Any]]
    metrics: list[MetricsLine]
    notes: list[str]


def load_run(run_dir: Path) -> RunData:
    """Read the manifest, every node's samples, the markers and the metrics.

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
    samples = _read_samples(layout, manifest, notes)
    if not any(samples.values()):
        where = layout.nodes_dir
        states = ", ".join(f"{n.name} {n.status}" for n in manifest.nodes.values()) or "none"
        raise ReportError(
            f"{run_dir}: no telemetry samples in {where}/*/samples.jsonl (nodes: {states}); "
            f"the samplers recorded nothing (see `error` in telemetry/manifest.json), "
            f"{HOW_TO_RECORD}"
        )
    markers = read_markers(run_dir)
    if not markers:
        notes.append("no markers (markers/rank-*.jsonl): no step, barrier or phase figures")
    return RunData(run_dir, manifest, samples, markers, _read_metrics(layout, notes), notes)


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


def _read_samples(
    layout: RunDir, manifest: Manifest, notes: list[str]
) -> dict[str, list[dict[str, Any]]]:
    nodes_dir = layout.nodes_dir
    names = list(manifest.nodes)
    if nodes_dir.is_dir():
        extra = sorted(p.name for p in nodes_dir.iterdir() if p.is_dir() and p.name not in names)
        for name in extra:
            notes.append(f"node {name}: samples without a manifest entry; clock offset 0 s assumed")
            manifest.nodes[name] = NodeManifest.unlisted(name)
        names += extra
    samples: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        path = layout.node_samples(name)
        samples[name] = _read_jsonl(path, notes) if path.is_file() else []
    return samples


def _read_jsonl(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    """Records with a finite ``wall_s`` and a ``device``; others are counted in a note."""
    records: list[dict[str, Any]] = []
    bad = 0
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if (
                isinstance(record, dict)
                and _number(record.get("wall_s")) is not None
                and isinstance(record.get("device"), str)
            ):
                records.append(record)
            else:
                bad += 1
    if bad:
        notes.append(f"{path}: {bad} unreadable line(s) skipped")
    return records


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


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
