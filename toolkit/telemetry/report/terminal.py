"""The terminal summary: a screen's worth at any cluster size, everything with ``--all``.

Run totals first (how the steps were found, the phases the ranks marked, who kept the
others waiting); then the nodes (a line each when few, else alike nodes grouped on
one line and each node that differs on its own); the devices (a line each when few,
else one line per kind with ranges and medians); the devices or nodes that stand out
(``outliers.py``); the cross-checks; the first notes. ``show_all`` prints every node,
device, outlier, check and note.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from toolkit.inventory.hostrange import name_ranges
from toolkit.telemetry.report.alike_nodes import NodeGroup, devices_of, group_nodes
from toolkit.telemetry.report.build import Report
from toolkit.telemetry.report.figures.crosscheck import TOLERANCE, CrossCheck
from toolkit.telemetry.report.figures.energy import DeviceReport, NodeReport
from toolkit.telemetry.report.figures.outliers import (
    Outlier,
    Outliers,
    find_outliers,
    report_figures,
)
from toolkit.telemetry.report.units import joules, value_range, watts

FEW_NODES = 8  # at most this many nodes: a line per node
FEW_DEVICES = 16  # at most this many devices: a line per device
FEW_CHECKS = 8  # at most this many cross-checked GPUs: a line per GPU
DIFFERING_SHOWN = 6  # nodes that differ, shown one by one at most
OUTLIERS_SHOWN = 5
NOTE_LINES = 8  # notes shown up to this many lines (at least one note)
PHASE_LINES = 2  # marked phases shown on up to this many lines
CAUSE_LINES = 2  # stragglers explained on the screen (all of them in summary.json)
WIDTH = 98
# run_start's steps_from, in words (docs/markers.md).
STEPS_FROM = {
    "api": "toolkit.markers calls",
    "auto": "optimizer hooks (--auto-steps)",
    "hf": "the Hugging Face Trainer callback",
    "lightning": "the Lightning callback",
    "ray_train": "the Ray Train callback",
    "rtk": "rtk's trainer",
}


def short_device(device: str) -> str:
    """A GPU UUID cut to its first 8 hex digits (``GPU-0a1b2c3d``); others unchanged."""
    head, _, rest = device.partition("-")
    return f"{head}-{rest[:8]}" if rest and len(device) > 16 else device


def straggler_line(report: Report) -> str | None:
    """Who kept the others waiting at the barriers, and what the waiting cost."""
    found = report.stragglers
    slowest = found.slowest if found else None
    if found is None or slowest is None or not found.barriers:
        return None
    share = f" ({found.share:.1%} of the run)" if found.share is not None else ""
    derived, at = found.from_backward, f"barriers: {found.barriers}"
    if derived:
        at = f"step collectives (from backward phases): {derived}"
        if derived < found.barriers:
            at = f"barriers: {found.barriers - derived}, {at}"
    return (
        f"{at}, ranks waited {found.wait_s:.1f} s in all, using "
        f"{found.wait_energy_j:.1f} J{share}; last to arrive most often: rank {slowest.rank} "
        f"on {slowest.node} ({slowest.last} of {found.barriers})"
    )


def steps_from_line(report: Report) -> str | None:
    """``steps: 40, from optimizer hooks (--auto-steps)``; None when no rank said."""
    found = report.timeline.steps_from
    if found is None:
        return None
    steps = report.run.steps
    count = f"steps: {steps if steps is not None else 'none completed'}"
    if found.value is not None:
        return f"{count}, from {_how(found.value)}"
    said = [(_how(value), n) for value, n in found.ranks.items()]
    said += [("nothing said", found.unknown)] if found.unknown else []
    ways = "; ".join(f"{how} on {n} rank{'s' if n != 1 else ''}" for how, n in said)
    return f"{count}, found differently across ranks: {ways}"


def _how(steps_from: str) -> str:
    return STEPS_FROM.get(steps_from, f'"{steps_from[:24]}"')


def phase_lines(report: Report) -> list[str]:
    """The marked phases, longest first, on ``PHASE_LINES`` lines at most."""
    phases = sorted(report.marker_phases, key=lambda p: (-p.total_s, p.name))
    if not phases:
        return []
    energy = "; energy" if any(p.energy_j is not None for p in phases) else ""
    prefixes = [f"phases, per rank median/max s (slowest rank{energy}): ", "  "]
    items = [
        f"{p.name[:20]} {_seconds(p.median_rank_s)}/{_seconds(p.max_rank_s)} "
        f"({p.slowest_rank}" + (f"; {joules(p.energy_j)})" if p.energy_j is not None else ")")
        for p in phases
    ]
    rows: list[list[str]] = [[]]

    def fits(row: list[str]) -> bool:
        return len(prefixes[len(rows) - 1]) + len(", ".join(row)) <= WIDTH

    for item in items:
        if fits([*rows[-1], item]):
            rows[-1].append(item)
        elif len(rows) < PHASE_LINES:
            rows.append([item])
        else:
            break
    shown = sum(len(row) for row in rows)
    while shown < len(items):
        more = f"and {len(items) - shown} more (summary.json)"
        if fits([*rows[-1], more]):
            rows[-1].append(more)
            break
        rows[-1].pop()
        shown -= 1
    return [(prefix + ", ".join(row)).rstrip() for prefix, row in zip(prefixes, rows, strict=False)]


def outliers_of(report: Report) -> Outliers:
    """The report's devices against their cluster medians."""
    return find_outliers(report_figures(report.nodes.values()), report.window.duration_s)


def format_summary(report: Report, show_all: bool = False) -> str:
    """The terminal summary; ``show_all``: every node, device, check and note."""
    window = report.window
    outliers = outliers_of(report)
    devices = sum(len(n.devices) for n in report.nodes.values())
    lines = [
        f"rtk report: {report.run_dir}",
        f"window {window.duration_s:.1f} s (from the {window.basis}), head {report.timeline.head}"
        f", {report.rate_hz:g} Hz",
        "",
        *_run_lines(report),
    ]
    lines += phase_lines(report)
    waiting = straggler_line(report)
    if waiting:
        lines += textwrap.wrap(waiting, width=WIDTH, subsequent_indent="  ")
    for cause in report.causes[:CAUSE_LINES]:
        lines += textwrap.wrap(f"why: {cause.line()}", width=WIDTH, subsequent_indent="  ")
    if report.power is not None:
        for line in report.power.lines():
            lines += textwrap.wrap(line, width=WIDTH, subsequent_indent="  ")
    lines.append("")
    if show_all or len(report.nodes) <= FEW_NODES:
        lines += _node_table(report)
    else:
        odd = {o.node for o in outliers.found if o.device is None}
        lines += _node_groups(report, group_nodes(list(report.nodes.values()), odd), odd)
    lines.append("")
    if show_all or devices <= FEW_DEVICES:
        lines += _device_table(report)
    else:
        lines += _kind_lines(report)
    lines += _outlier_lines(outliers, show_all)
    lines += _check_lines(report, show_all)
    lines += _note_lines(report.notes, show_all)
    return "\n".join(lines)


def _run_lines(report: Report) -> list[str]:
    run, stats = report.run, report.step_stats
    steps = f"{run.steps} steps" if run.steps is not None else "no steps"
    tokens = f", {run.tokens:,} tokens" if run.tokens is not None else ""
    rate = f" ({run.tokens_per_s:,.1f} tokens/s)" if run.tokens_per_s is not None else ""
    energy_j = run.energy_j or 0.0
    found = steps_from_line(report)
    lines = [
        f"run: {run.duration_s or 0.0:.1f} s, {steps}{tokens}{rate}, {run.ranks} rank(s)"
        + (f", {run.restarts} restart(s)" if run.restarts else ""),
        *(_wrap(found, "", "  ") if found else []),
        f"energy: {energy_j:,.1f} J ({energy_j / 3600.0:.3f} Wh)"
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
    return lines


def _incomplete(count: int, included: bool) -> str:
    if not count:
        return ")"
    return ", all touched by gaps)" if included else f", {count} touched by gaps left out)"


# --- nodes -------------------------------------------------------------------------


def _node_table(report: Report) -> list[str]:
    lines = [
        f"{'node':<14} {'status':<9} {'offset_s':>9} {'energy_j':>11} {'Wh':>8} "
        f"{'avg_W':>7} {'peak_W':>7} {'covered':>7}"
    ]
    for node in report.nodes.values():
        lines.append(
            f"{node.name[:14]:<14} {node.status[:9]:<9} {node.offset_s:>+9.3f} "
            f"{node.energy_j:>11.1f} {node.energy_wh:>8.3f} {_num(node.avg_power_w, 7)} "
            f"{_num(node.peak_power_w, 7)} {node.covered_fraction:>7.1%}"
            + ("  partial" if node.partial else "")
        )
    return lines


def _node_groups(report: Report, groups: list[NodeGroup], odd: set[str]) -> list[str]:
    nodes = list(report.nodes.values())
    lines = [f"nodes: {len(nodes)} ({_device_count(nodes)})"]
    differing = [g for g in groups if not g.alike]
    for group in [g for g in groups if g.alike] + differing[:DIFFERING_SHOWN]:
        named = not group.alike and group.nodes[0].name in odd
        text = _group_text(report, group) + ("; an outlier (below)" if named else "")
        lines += _wrap(text, "  ", "      ")
    if len(differing) > DIFFERING_SHOWN:
        rest = [g.nodes[0].name for g in differing[DIFFERING_SHOWN:]]
        lines += _wrap(
            f"... and {len(rest)} more nodes that differ ({name_ranges(rest)}): rtk report --all",
            "  ",
            "    ",
        )
    return lines


def _group_text(report: Report, group: NodeGroup) -> str:
    nodes = group.nodes
    gpus, host, _ = devices_of(nodes[0])
    has = f"{gpus} GPU{'s' if gpus != 1 else ''}" + (" + host" if host else "")
    energy = f"energy {value_range('J', [n.energy_j for n in nodes])}"
    avg = f"avg {value_range('W', [n.avg_power_w for n in nodes])}"
    peak = f"peak {value_range('W', [n.peak_power_w for n in nodes])}"
    if group.alike:
        status = "all complete" if len(nodes) > 1 else "complete"
        count = f" ({len(nodes)} nodes)" if len(nodes) > 1 else ""
        return f"{name_ranges(group.names)}{count}: {has}, {status}, {energy}, {avg}, {peak}"
    node = nodes[0]
    status = node.status + (f" ({node.error})" if node.error else "")
    gaps = "; ".join(
        f"{g.where} gap {g.duration_s:.1f} s at {report.relative_s(g.start_s):.1f} s"
        for g in node.gaps
    )
    covered = f", {node.covered_fraction:.0%} covered" if node.partial else ""
    return f"{node.name}: {has}, {status}, {energy}, {avg}, {peak}{covered}" + (
        f"; {gaps}" if gaps else ""
    )


def _device_count(nodes: Sequence[NodeReport]) -> str:
    gpus = sum(devices_of(n)[0] for n in nodes)
    hosts = sum(1 for n in nodes if "host" in n.devices)
    return f"{gpus} GPUs, {hosts} hosts"


# --- devices -----------------------------------------------------------------------


def _device_table(report: Report) -> list[str]:
    lines = [
        f"{'node/device':<24} {'source':<16} {'energy_j':>11} {'Wh':>8} {'avg_W':>7} "
        f"{'peak_W':>7} {'throttled':>9}",
    ]
    for node in report.nodes.values():
        for device in node.devices.values():
            lines += _device_lines(report, node, device)
    return lines


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
    return [row, *(line for text in extra for line in _wrap(text, indent, indent + "  "))]


def _kind_lines(report: Report) -> list[str]:
    """Per kind of device: how many, the spread of their figures, what is odd."""
    lines = []
    for kind, label in (("gpu", "GPUs"), ("host", "hosts")):
        devices = [d for n in report.nodes.values() for d in n.devices.values() if d.kind == kind]
        if not devices:
            continue
        sources = ", ".join(sorted({d.energy_source for d in devices}))
        lines += _wrap(
            f"{label} ({len(devices)}, {sources}): "
            f"energy {value_range('J', [d.energy_j for d in devices], median=True)}, "
            f"avg {value_range('W', [d.avg_power_w for d in devices], median=True)}",
            "",
            "  ",
        )
        more = [f"peak {value_range('W', [d.peak_power_w for d in devices])}"]
        throttled = [d.throttled_s for d in devices if d.throttled_s > 0]
        if throttled:
            more.append(f"{len(throttled)} throttled (at most {max(throttled):.1f} s)")
        partial = sum(1 for d in devices if d.partial)
        if partial:
            more.append(f"{partial} partial (gaps)")
        lines += _wrap("; ".join(more), "  ", "  ")
    return lines


# --- outliers, checks, notes ---------------------------------------------------------


def _outlier_lines(outliers: Outliers, show_all: bool) -> list[str]:
    compared = {
        kind: n
        for kind, n in outliers.compared.items()
        if any(v is not None for v in outliers.medians.get(kind, {}).values())
    }
    if not compared:
        return []
    subjects = outliers.subjects()
    if not subjects:
        peers = ", ".join(f"{n} {'GPUs' if k == 'gpu' else 'hosts'}" for k, n in compared.items())
        return ["", f"outliers: none among {peers} (against their medians)"]
    lines = ["", f"outliers ({len(subjects)}, against the median device of their kind):"]
    shown = subjects if show_all else subjects[:OUTLIERS_SHOWN]
    for node, device, found in shown:
        who = f"{node}/{short_device(device)}" if device else f"{node} (all {found[0].devices})"
        text = f"{who}: " + "; ".join(outlier_text(outliers, o) for o in found)
        lines += _wrap(text, "  ", "      ")
    if len(subjects) > len(shown):
        lines.append(f"  ... and {len(subjects) - len(shown)} more: summary.json (outliers)")
    return lines


def rules_text(outliers: Outliers) -> str:
    """The thresholds in words: ``avg power ±15%, energy +15%, ...``."""
    words = []
    for rule in outliers.rules:
        sign = "±" if rule.below else "+"
        size = f"{rule.threshold:.0%}" if rule.relative else f"{rule.threshold:g} {rule.unit}"
        words.append(f"{rule.label} {sign}{size}")
    return ", ".join(words)


def outlier_text(outliers: Outliers, outlier: Outlier) -> str:
    """``avg power 520 W (+24% vs 420 W)``."""
    rule = outliers.rule(outlier.metric)
    show = {"J": joules, "W": watts}.get(rule.unit, lambda v: f"{v:.1f} {rule.unit}")
    excess = f"{outlier.excess:+.0%}" if rule.relative else f"{outlier.excess:+.1f} {rule.unit}"
    return f"{rule.label} {show(outlier.value)} ({excess} vs {show(outlier.median)})"


def _check_lines(report: Report, show_all: bool) -> list[str]:
    checks = report.cross_checks
    if not checks:
        return []
    if show_all or len(checks) <= FEW_CHECKS:
        return ["", *(line for c in checks for line in _wrap(_check_line(c), "", "  "))]
    return ["", *_wrap(check_summary(checks), "", "  ")]


def check_summary(checks: Sequence[CrossCheck]) -> str:
    """The cross-checks on one line: the spread of the ratios, and which GPUs disagree."""
    ratios = [c.ratio for c in checks if c.ratio is not None]
    flagged = [c for c in checks if c.flagged]
    ends = (min(ratios), max(ratios)) if ratios else ()
    spread = " to ".join(dict.fromkeys(f"{r:.3f}" for r in ends)) or "n/a"
    text = (
        f"cross-check, energy counter against integrated power ({len(checks)} GPUs): "
        f"power/counter {spread}; "
        f"{len(flagged)} with windows off by >{TOLERANCE:.0%}"
    )
    if flagged:
        names = [f"{c.node}/{short_device(c.device)}" for c in flagged]
        text += ": " + ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    return text


def _check_line(check: CrossCheck) -> str:
    ratio = f"{check.ratio:.3f}" if check.ratio is not None else "n/a"
    return (
        f"check {check.node}/{short_device(check.device)}: power/counter {ratio}, "
        f"{len(check.flagged)} of {len(check.windows)} windows off by >{TOLERANCE:.0%}"
        f" ({check.basis}" + (f"; {check.skipped} with gaps left out)" if check.skipped else ")")
    )


def _note_lines(notes: list[str], show_all: bool) -> list[str]:
    """The notes, or as many as fit ``NOTE_LINES`` (at least one) and how many more."""
    if not notes:
        return []
    shown: list[str] = []
    for i, note in enumerate(notes):
        wrapped = _wrap(note, "  - ", "    ")
        if not show_all and i and len(shown) + len(wrapped) > NOTE_LINES:
            break
        shown += wrapped
    else:
        return ["", "notes:", *shown]
    return [
        "",
        f"notes ({len(notes)}):",
        *shown,
        f"  ... and {len(notes) - i} more note{'s' if len(notes) - i > 1 else ''}, "
        "see summary.json (or --all)",
    ]


def _seconds(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def _num(value: float | None, width: int) -> str:
    return f"{value:>{width}.1f}" if value is not None else f"{'-':>{width}}"


def _wrap(text: str, first: str, rest: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest)
