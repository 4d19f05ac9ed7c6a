"""Read a run directory (docs/telemetry.md) into typed data, touching nothing."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.telemetry.report.errors import ReportError
from toolkit.train.markers import read_markers

HOW_TO_RECORD = "record one with `rtk train ... --telemetry`"


@dataclass(frozen=True)
class NodeManifest:
    """One node's entry in ``telemetry/manifest.json``.

    Attributes:
        name: The node's key in the manifest (the directory under ``telemetry/nodes``).
        hostname: Its hostname (markers may name a node by either).
        offset_s: The node's wall clock minus the head's.
        uncertainty_s: Half the median round trip of the offset estimate.
        status: ``complete``, ``lost`` or ``missing``.
        devices: Device id -> what the sampler recorded about it (``kind``, ...).
        samples_expected: The sample count the collector reported, when known.
        error: Why the sampler failed, when it did.
    """

    name: str
    hostname: str
    offset_s: float
    uncertainty_s: float
    status: str
    devices: dict[str, dict[str, Any]]
    samples_expected: int | None
    error: str | None


@dataclass(frozen=True)
class Manifest:
    """The telemetry manifest: sample rates and the nodes.

    Attributes:
        head: The node whose clock is the report's timeline.
        rate_hz: Full readings per second.
        power_rate_hz: Fast instant-power readings per second.
        nodes: Node name -> its entry.
    """

    head: str
    rate_hz: float
    power_rate_hz: float
    nodes: dict[str, NodeManifest]


@dataclass(frozen=True)
class RunData:
    """Everything a report reads from a run directory, as written.

    Attributes:
        run_dir: The run directory.
        manifest: The telemetry manifest.
        samples: Node -> its sample records in file order (unreadable lines dropped).
        markers: Every rank's marker records, in file order per rank.
        metrics: ``metrics.jsonl`` lines, one per step (the last line of a step wins),
            sorted by step.
        notes: What was odd about the input (skipped lines, missing files).
    """

    run_dir: Path
    manifest: Manifest
    samples: dict[str, list[dict[str, Any]]]
    markers: list[dict[str, Any]]
    metrics: list[dict[str, Any]]
    notes: list[str]


def load_run(run_dir: Path) -> RunData:
    """Read the manifest, every node's samples, the markers and the metrics.

    Raises:
        ReportError: No run directory, no manifest, or not one sample in it.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir}: no such run directory")
    notes: list[str] = []
    manifest = _read_manifest(run_dir, notes)
    samples = _read_samples(run_dir, manifest, notes)
    if not any(samples.values()):
        where = run_dir / "telemetry" / "nodes"
        states = ", ".join(f"{n.name} {n.status}" for n in manifest.nodes.values()) or "none"
        raise ReportError(
            f"{run_dir}: no telemetry samples in {where}/*/samples.jsonl (nodes: {states}); "
            f"the samplers recorded nothing (see `error` in telemetry/manifest.json), "
            f"{HOW_TO_RECORD}"
        )
    markers = read_markers(run_dir)
    if not markers:
        notes.append("no markers (markers/rank-*.jsonl): no step, barrier or phase figures")
    return RunData(run_dir, manifest, samples, markers, _read_metrics(run_dir, notes), notes)


def _read_manifest(run_dir: Path, notes: list[str]) -> Manifest:
    path = run_dir / "telemetry" / "manifest.json"
    if not path.is_file():
        raise ReportError(
            f"{run_dir}: no telemetry/manifest.json, so this run has no power telemetry; "
            f"{HOW_TO_RECORD}"
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReportError(f"{path}: unreadable ({e})") from e
    if not isinstance(raw, dict) or not isinstance(raw.get("nodes"), dict):
        raise ReportError(f"{path}: not a telemetry manifest (no `nodes` object)")
    rate_hz = _positive(raw.get("rate_hz"))
    if rate_hz is None:
        notes.append(f"manifest has no valid rate_hz ({raw.get('rate_hz')!r}); 1 Hz assumed")
        rate_hz = 1.0
    head = str(raw.get("head") or next(iter(raw["nodes"]), ""))
    nodes = {
        str(name): _node(str(name), entry if isinstance(entry, dict) else {}, name == head, notes)
        for name, entry in raw["nodes"].items()
    }
    return Manifest(head, rate_hz, _positive(raw.get("power_rate_hz")) or rate_hz, nodes)


def _node(name: str, entry: dict[str, Any], is_head: bool, notes: list[str]) -> NodeManifest:
    clock = entry.get("clock") if isinstance(entry.get("clock"), dict) else None
    offset_s = _number(clock.get("offset_s")) if clock else None
    if offset_s is None and not is_head:
        notes.append(f"node {name}: no clock offset in the manifest; 0 s assumed")
    elif (
        not is_head
        and clock
        and "start" in clock
        and not clock.get("start")
        and not clock.get("end")
    ):
        notes.append(f"node {name}: its clock offset was never measured; 0 s assumed")
    devices = entry.get("devices")
    if not isinstance(devices, dict):
        devices = {}
    expected = entry.get("samples")
    return NodeManifest(
        name=name,
        hostname=str(entry.get("hostname") or name),
        offset_s=offset_s or 0.0,
        uncertainty_s=(_number(clock.get("uncertainty_s")) if clock else None) or 0.0,
        status=str(entry.get("status") or "unknown"),
        devices={str(k): dict(v) if isinstance(v, dict) else {} for k, v in devices.items()},
        samples_expected=expected if isinstance(expected, int) else None,
        error=None if entry.get("error") is None else str(entry["error"]),
    )


def _read_samples(
    run_dir: Path, manifest: Manifest, notes: list[str]
) -> dict[str, list[dict[str, Any]]]:
    nodes_dir = run_dir / "telemetry" / "nodes"
    names = list(manifest.nodes)
    if nodes_dir.is_dir():
        extra = sorted(p.name for p in nodes_dir.iterdir() if p.is_dir() and p.name not in names)
        for name in extra:
            notes.append(f"node {name}: samples without a manifest entry; clock offset 0 s assumed")
            manifest.nodes[name] = NodeManifest(name, name, 0.0, 0.0, "unknown", {}, None, None)
        names += extra
    samples: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        path = nodes_dir / name / "samples.jsonl"
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


def _read_metrics(run_dir: Path, notes: list[str]) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        notes.append("no metrics.jsonl: token figures come from the markers, if any")
        return []
    by_step: dict[int, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
            by_step[int(record["step"])] = record
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
    return [by_step[step] for step in sorted(by_step)]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _positive(value: Any) -> float | None:
    number = _number(value)
    return number if number is not None and number > 0 else None
