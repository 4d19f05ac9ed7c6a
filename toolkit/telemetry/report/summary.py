"""The report's figures as a JSON-ready dict (summary.json) and as terminal text."""

from __future__ import annotations

import math
import textwrap
from dataclasses import asdict
from typing import Any

from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.crosscheck import TOLERANCE, CrossCheck
from toolkit.telemetry.report.curves import Gap
from toolkit.telemetry.report.energy import DeviceReport, NodeReport

SCHEMA_VERSION = 1


def summary_dict(report: Report) -> dict[str, Any]:
    """Every figure of the report; times are seconds since the window's start.

    Non-finite numbers (from odd input) become None, so the result is strict JSON.
    """
    finite: dict[str, Any] = _finite(_summary(report))
    return finite


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _summary(report: Report) -> dict[str, Any]:
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
        "run": {
            "duration_s": run.duration_s,
            "energy_j": run.energy_j,
            "energy_wh": run.energy_wh,
            "steps": run.steps,
            "tokens": run.tokens,
            "energy_per_step_j": run.energy_per_step_j,
            "energy_per_token_j": run.energy_per_token_j,
            "tokens_per_s": run.tokens_per_s,
            "tokens_per_j": run.tokens_per_j,
            "partial": run.partial,
            "restarts": run.restarts,
            "ranks": run.ranks,
        },
        "nodes": {name: _node(report, node) for name, node in report.nodes.items()},
        "cross_check": {
            "tolerance": TOLERANCE,
            "devices": [_check(report, check) for check in report.cross_checks],
        },
        "steps": {
            "rank": report.timeline.step_rank,
            "stats": None if stats is None else asdict(stats),
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
                "nodes_j": p.nodes_j,
                "complete": p.complete,
            }
            for p in report.phases
        ],
        "barriers": [
            {
                "step": b.step,
                "t_s": report.relative_s(b.t_s),
                "spread_s": b.spread_s,
                "ranks": b.ranks,
            }
            for b in report.barriers
        ],
        "stragglers": _stragglers(report),
        "notes": report.notes,
    }


def _stragglers(report: Report) -> dict[str, Any] | None:
    found = report.stragglers
    if found is None:
        return None
    slowest = found.slowest
    return {
        "barriers": found.barriers,
        "wait_s": found.wait_s,
        "wait_energy_j": found.wait_energy_j,
        "share_of_run": found.share,
        "last_by_node": found.last_by_node,
        "slowest_rank": None if slowest is None else slowest.rank,
        "ranks": [asdict(r) for r in found.ranks],
    }


def straggler_line(report: Report) -> str | None:
    """Who kept the others waiting at the barriers, and what the waiting cost."""
    found = report.stragglers
    slowest = found.slowest if found else None
    if found is None or slowest is None or not found.barriers:
        return None
    share = f" ({found.share:.1%} of the run)" if found.share is not None else ""
    return (
        f"barriers: {found.barriers}, ranks waited {found.wait_s:.1f} s in all, using "
        f"{found.wait_energy_j:.1f} J{share}; last to arrive most often: rank {slowest.rank} "
        f"on {slowest.node} ({slowest.last} of {found.barriers})"
    )


def _node(report: Report, node: NodeReport) -> dict[str, Any]:
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


def _device(report: Report, device: DeviceReport) -> dict[str, Any]:
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
        "throttle_reasons_s": device.throttle_reasons_s,
        "counter_resets": device.counter_resets,
    }


def _gap(report: Report, gap: Gap) -> dict[str, Any]:
    return {
        "start_s": report.relative_s(gap.start_s),
        "end_s": report.relative_s(gap.end_s),
        "duration_s": gap.duration_s,
        "where": gap.where,
    }


def _check(report: Report, check: CrossCheck) -> dict[str, Any]:
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


def short_device(device: str) -> str:
    """A GPU UUID cut to its first 8 hex digits (``GPU-0a1b2c3d``); others unchanged."""
    head, _, rest = device.partition("-")
    return f"{head}-{rest[:8]}" if rest and len(device) > 16 else device


def format_summary(report: Report) -> str:
    """The terminal summary: per-node and per-device tables, then the run's figures."""
    window = report.window
    lines = [
        f"rtk report: {report.run_dir}",
        f"window {window.duration_s:.1f} s (from the {window.basis}), head {report.timeline.head}"
        f", {report.rate_hz:g} Hz",
        "",
        f"{'node':<14} {'status':<9} {'offset_s':>9} {'energy_j':>11} {'Wh':>8} "
        f"{'avg_W':>7} {'peak_W':>7} {'covered':>7}",
    ]
    for node in report.nodes.values():
        lines.append(
            f"{node.name[:14]:<14} {node.status[:9]:<9} {node.offset_s:>+9.3f} "
            f"{node.energy_j:>11.1f} {node.energy_wh:>8.3f} {_num(node.avg_power_w, 7)} "
            f"{_num(node.peak_power_w, 7)} {node.covered_fraction:>7.1%}"
            + ("  partial" if node.partial else "")
        )
    lines += [
        "",
        f"{'node/device':<24} {'source':<16} {'energy_j':>11} {'Wh':>8} {'avg_W':>7} "
        f"{'peak_W':>7} {'throttled':>9}",
    ]
    for node in report.nodes.values():
        for device in node.devices.values():
            lines += _device_lines(report, node, device)
    lines += ["", *_run_lines(report)]
    waiting = straggler_line(report)
    if waiting:
        lines += textwrap.wrap(waiting, width=98, subsequent_indent="  ")
    if report.notes:
        lines += ["", "notes:"]
        for note in report.notes:
            lines += textwrap.wrap(note, width=98, initial_indent="  - ", subsequent_indent="    ")
    return "\n".join(lines)


def _device_lines(report: Report, node: NodeReport, device: DeviceReport) -> list[str]:
    name = f"{node.name}/{short_device(device.device)}"
    source = device.energy_source + ("" if device.counted else "*")
    row = (
        f"{name[:24]:<24} {source[:16]:<16} {device.energy_j:>11.1f} {device.energy_wh:>8.3f} "
        f"{_num(device.avg_power_w, 7)} {_num(device.peak_power_w, 7)} "
        f"{device.throttled_s:>8.1f}s"
    )
    extra = []
    if device.throttle_reasons_s:
        extra.append("throttled by " + ", ".join(device.throttle_reasons_s))
    if device.partial:
        gaps = ", ".join(
            f"{g.where} {g.duration_s:.1f} s at {report.relative_s(g.start_s):.1f} s"
            for g in device.gaps
        )
        extra.append(f"partial ({device.covered_fraction:.0%} covered): {gaps}")
    if not device.counted:
        extra.append(f"* not in the node total ({node.scope})")
    indent = " " * 26
    wrapped = [
        piece
        for text in extra
        for piece in textwrap.wrap(text, 98, initial_indent=indent, subsequent_indent=indent + "  ")
    ]
    return [row, *wrapped]


def _run_lines(report: Report) -> list[str]:
    run, stats = report.run, report.step_stats
    steps = f"{run.steps} steps" if run.steps is not None else "no steps"
    tokens = f", {run.tokens:,} tokens" if run.tokens is not None else ""
    rate = f" ({run.tokens_per_s:,.1f} tokens/s)" if run.tokens_per_s is not None else ""
    lines = [
        f"run: {run.duration_s:.1f} s, {steps}{tokens}{rate}, {run.ranks} rank(s)"
        + (f", {run.restarts} restart(s)" if run.restarts else ""),
        f"energy: {run.energy_j:,.1f} J ({run.energy_wh:.3f} Wh)"
        + (" partial" if run.partial else ""),
    ]
    per = []
    if run.energy_per_step_j is not None:
        per.append(f"{run.energy_per_step_j:,.2f} J/step")
    if run.energy_per_token_j is not None:
        per.append(f"{run.energy_per_token_j:.4g} J/token")
    if run.tokens_per_j is not None:
        per.append(f"{run.tokens_per_j:.4g} tokens/J")
    if per:
        lines.append("        " + ", ".join(per))
    if stats is not None:
        lines.append(
            f"per step: median {stats.median_j:,.2f} J, p10 {stats.p10_j:,.2f}, "
            f"p90 {stats.p90_j:,.2f} ({stats.steps} steps"
            + _incomplete(stats.incomplete, stats.with_incomplete)
        )
    if report.phases:
        lines.append(f"phases between barriers: {len(report.phases)} (see summary.json)")
    for check in report.cross_checks:
        ratio = f"{check.ratio:.3f}" if check.ratio is not None else "n/a"
        lines.append(
            f"check {check.node}/{short_device(check.device)}: power/counter {ratio}, "
            f"{len(check.flagged)} of {len(check.windows)} windows off by >{TOLERANCE:.0%}"
            f" ({check.basis}"
            + (f"; {check.skipped} with gaps left out)" if check.skipped else ")")
        )
    return lines


def _incomplete(count: int, included: bool) -> str:
    if not count:
        return ")"
    return ", all touched by gaps)" if included else f", {count} touched by gaps left out)"


def _num(value: float | None, width: int) -> str:
    return f"{value:>{width}.1f}" if value is not None else f"{'-':>{width}}"
