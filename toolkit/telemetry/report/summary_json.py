"""The report's figures as a JSON document (summary.json); the terminal text is terminal.py's.

summary.json is JSON by contract (``rtk report --json`` prints it, other programs read
it), so it is built as a ``JsonObject`` straight from the report's typed records.

What the marker API added (docs/markers.md) appears only in runs whose markers carry
it, so an older run's summary.json stays as it was: ``run.steps_from`` and
``run.steps_from_ranks`` (how the steps were found), ``marker_phases`` (time and energy
per phase name), ``marks`` (the user's events by name), and ``stragglers.source`` and
``stragglers.backward_steps`` once waits came from backward phases. Every run with
waits has ``stragglers.causes`` (why each straggler is late) and ``stragglers.scores``
(each rank's slowness score), ``figures/straggler_causes.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields

from toolkit.json_types import JsonObject, JsonValue
from toolkit.power.policy_summary import PowerPoint, PowerSummary
from toolkit.rundir.summary import SCHEMA_VERSION
from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.figures.crosscheck import TOLERANCE, CrossCheck
from toolkit.telemetry.report.figures.curves import Gap
from toolkit.telemetry.report.figures.energy import DeviceReport, NodeReport
from toolkit.telemetry.report.figures.marker_phases import MarkerPhase
from toolkit.telemetry.report.figures.outliers import Outliers
from toolkit.telemetry.report.figures.steps import StepStats
from toolkit.telemetry.report.figures.stragglers import RankWaits
from toolkit.telemetry.report.terminal import outliers_of

__all__ = ["summary_dict"]


def summary_dict(report: Report) -> JsonObject:
    """Every figure of the report; times are seconds since the window's start.

    Non-finite numbers (from odd input) become None, so the result is strict JSON.
    """
    return {k: _finite(v) for k, v in _summary(report).items()}


def _finite(value: JsonValue) -> JsonValue:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _numbers(values: Mapping[str, float | None]) -> JsonObject:
    """A map of names to numbers, as a JSON object (in its order)."""
    return dict(values)


def _summary(report: Report) -> JsonObject:
    window = report.window
    run = report.run
    stats = report.step_stats
    return {
        "v": SCHEMA_VERSION,
        "run_dir": str(report.run_dir),
        "head": report.timeline.head,
        "rate_hz": report.rate_hz,
        "window": {
            "start_wall_s": window.start_s,
            "end_wall_s": window.end_s,
            "duration_s": window.duration_s,
            "basis": window.basis,
        },
        # The record the sweep's results read back (toolkit/rundir/summary.py).
        "run": {**run.to_json(), **_steps_from(report)},
        "nodes": {name: _node(report, node) for name, node in report.nodes.items()},
        "cross_check": {
            "tolerance": TOLERANCE,
            "devices": [_check(report, check) for check in report.cross_checks],
        },
        "steps": {
            "rank": report.timeline.step_rank,
            "stats": None if stats is None else _scalars(stats),
            "per_step": [
                {
                    "step": s.step,
                    "start_s": report.relative_s(s.start_s),
                    "duration_s": s.duration_s,
                    "energy_j": s.energy_j,
                    "complete": s.complete,
                }
                for s in report.steps
            ],
        },
        "phases": [
            {
                "label": p.label,
                "start_s": report.relative_s(p.start_s),
                "duration_s": p.duration_s,
                "steps": p.steps,
                "energy_j": p.energy_j,
                "avg_power_w": p.avg_power_w,
                "nodes_j": _numbers(p.nodes_j),
                "complete": p.complete,
            }
            for p in report.phases
        ],
        **(
            {"marker_phases": [_scalars(p) for p in report.marker_phases]}
            if report.marker_phases
            else {}
        ),
        "barriers": [
            {
                "step": b.step,
                "t_s": report.relative_s(b.t_s),
                "spread_s": b.spread_s,
                "ranks": b.ranks,
            }
            for b in report.barriers
        ],
        **({"marks": _numbers(report.timeline.marks)} if report.timeline.marks else {}),
        "stragglers": _stragglers(report),
        **({"power_policy": _power(report.power)} if report.power is not None else {}),
        "outliers": _outliers(outliers_of(report)),
        "notes": list[JsonValue](report.notes),
    }


def _power(power: PowerSummary) -> JsonObject:
    """The power policy's outcome: its windows, the kept limits, what it saved."""
    return {
        "policy": power.policy,
        "gpus": power.gpus,
        "energy_saved": power.energy_saved,
        "slowdown": power.slowdown,
        "baseline": _scalars(power.baseline) if power.baseline is not None else None,
        "kept": _scalars(power.kept) if power.kept is not None else None,
        "chosen_w": power.chosen_w,
        "windows": [_scalars(p) for p in power.points],
        "last_reason": power.last_reason,
        "notes": list[JsonValue](power.notes),
    }


def _outliers(outliers: Outliers) -> JsonObject:
    return {
        "rules": {
            r.metric: {"relative": r.relative, "threshold": r.threshold, "below_too": r.below}
            for r in outliers.rules
        },
        "medians": {kind: _numbers(medians) for kind, medians in outliers.medians.items()},
        "compared": _numbers(outliers.compared),
        "found": [
            {
                "metric": o.metric,
                "node": o.node,
                "device": o.device,
                "kind": o.kind,
                "devices": o.devices,
                "value": o.value,
                "median": o.median,
                "excess": o.excess,
                "score": o.score,
            }
            for o in outliers.found
        ],
    }


def _steps_from(report: Report) -> JsonObject:
    """How the steps were found: one value, or ``mixed`` (and how many ranks said each)."""
    found = report.timeline.steps_from
    if found is None:
        return {}
    ranks: JsonObject = {**found.ranks, **({"unknown": found.unknown} if found.unknown else {})}
    return {"steps_from": found.value or "mixed", "steps_from_ranks": ranks}


def _stragglers(report: Report) -> JsonObject | None:
    found = report.stragglers
    if found is None:
        return None
    slowest = found.slowest
    # Where the waits came from, once backward phases gave some (else: barriers only).
    source: JsonObject = {}
    if "backward" in found.sources:
        source = {"source": "+".join(found.sources), "backward_steps": found.from_backward}
    return {
        "barriers": found.barriers,
        **source,
        "wait_s": found.wait_s,
        "wait_energy_j": found.wait_energy_j,
        "share_of_run": found.share,
        "last_by_node": _numbers(found.last_by_node),
        "slowest_rank": None if slowest is None else slowest.rank,
        "ranks": [_scalars(r) for r in found.ranks],
        "causes": [cause.to_json() for cause in report.causes],
        "scores": report.slowness.to_json() if report.slowness is not None else None,
    }


def _node(report: Report, node: NodeReport) -> JsonObject:
    return {
        "hostname": node.hostname,
        "status": node.status,
        "error": node.error,
        "offset_s": node.offset_s,
        "uncertainty_s": node.uncertainty_s,
        "energy_j": node.energy_j,
        "energy_wh": node.energy_wh,
        "scope": node.scope,
        "avg_power_w": node.avg_power_w,
        "peak_power_w": node.peak_power_w,
        "samples": node.samples,
        "covered_fraction": node.covered_fraction,
        "partial": node.partial,
        "gaps": [_gap(report, g) for g in node.gaps],
        "devices": {name: _device(report, d) for name, d in node.devices.items()},
    }


def _device(report: Report, device: DeviceReport) -> JsonObject:
    return {
        "kind": device.kind,
        "samples": device.samples,
        "energy_j": device.energy_j,
        "energy_wh": device.energy_wh,
        "energy_source": device.energy_source,
        "energy_covered_s": device.energy_covered_s,
        "counted_in_node": device.counted,
        "avg_power_w": device.avg_power_w,
        "peak_power_w": device.peak_power_w,
        "power_source": device.power_source,
        "covered_fraction": device.covered_fraction,
        "partial": device.partial,
        "gaps": [_gap(report, g) for g in device.gaps],
        "throttled_s": device.throttled_s,
        "throttle_reasons_s": _numbers(device.throttle_reasons_s),
        "counter_resets": device.counter_resets,
    }


def _gap(report: Report, gap: Gap) -> JsonObject:
    return {
        "start_s": report.relative_s(gap.start_s),
        "end_s": report.relative_s(gap.end_s),
        "duration_s": gap.duration_s,
        "where": gap.where,
    }


def _check(report: Report, check: CrossCheck) -> JsonObject:
    return {
        "node": check.node,
        "device": check.device,
        "basis": check.basis,
        "ratio": check.ratio,
        "counter_j": check.counter_j,
        "power_j": check.power_j,
        "compared": len(check.windows),
        "skipped": check.skipped,
        "flagged": len(check.flagged),
        "windows": [
            {
                "start_s": report.relative_s(w.start_s),
                "end_s": report.relative_s(w.end_s),
                "counter_j": w.counter_j,
                "power_j": w.power_j,
                "ratio": w.ratio,
                "flagged": w.flagged,
            }
            for w in check.windows
        ],
    }


def _scalars(record: StepStats | RankWaits | MarkerPhase | PowerPoint) -> JsonObject:
    """A record of scalar fields, field by field in its order (what ``asdict`` gave)."""
    out: JsonObject = {}
    for name in (f.name for f in fields(record)):
        value = getattr(record, name)
        if not (value is None or isinstance(value, bool | int | float | str)):
            raise TypeError(f"{type(record).__name__}.{name} is not a JSON scalar: {value!r}")
        out[name] = value
    return out
