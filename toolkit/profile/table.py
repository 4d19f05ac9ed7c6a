"""A sweep's results as a terminal table, with the best configurations named."""

from __future__ import annotations

import math
from collections.abc import Sequence

from toolkit.profile.pareto import pareto_basis
from toolkit.profile.results import (
    METRICS,
    ConfigRow,
    Spread,
    axis_names,
    axis_text,
    best_rows,
)


def format_table(rows: Sequence[ConfigRow]) -> str:
    """The terminal table: one line per configuration, then the best configurations.

    The footer names the figures the Pareto front (``*``) is drawn on, and why when it
    falls back to time and energy per run.
    """
    if not rows:
        return "no runs found in the sweep"
    axes = axis_names(r.axes for r in rows)
    header = ["", *axes, "tokens/s", "J/token", "avg W", "time s", "energy J", "idle W"]
    header += ["ok", "failed"]
    columns: list[list[str]] = [["*" if r.pareto else "" for r in rows]]
    columns += [[axis_text(r.axes[a]) if a in r.axes else "-" for r in rows] for a in axes]
    columns += [_spread_column([r.metric(m) for r in rows]) for m in METRICS]
    columns += [[str(r.repeats_ok) for r in rows], [str(r.repeats_failed) for r in rows]]
    widths = [max(len(h), *(len(c) for c in col)) for h, col in zip(header, columns, strict=True)]
    left = 1 + len(axes)  # the marker and the axes are left-aligned, figures right-aligned

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    lines = [line(header), *(line(cells) for cells in zip(*columns, strict=True))]
    runs_ok, runs_failed = sum(r.repeats_ok for r in rows), sum(r.repeats_failed for r in rows)
    basis = pareto_basis(rows)
    lines += [
        "",
        f"{len(rows)} configurations, {runs_ok} repeats ok, {runs_failed} failed (not averaged);"
        f" figures: mean ± sample std; * on the Pareto front of {basis.label}",
        *([f"note: {basis.note}"] if basis.note else []),
        _best_line(rows),
    ]
    return "\n".join(lines)


def _spread_column(spreads: Sequence[Spread]) -> list[str]:
    means = [_num(s.mean) for s in spreads]
    stds = [_std(s.std) for s in spreads]
    mean_w, std_w = max(map(len, means)), max(map(len, stds))
    return [
        f"{m:>{mean_w}} ± {d:<{std_w}}" if s.n else f"{'-':>{mean_w}}{'':{std_w + 3}}"
        for m, d, s in zip(means, stds, spreads, strict=True)
    ]


def _num(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _std(value: float) -> str:
    """Two significant digits, never an exponent: 0.00092, 2.5, 120."""
    if not math.isfinite(value) or value == 0:
        return _num(value)
    rounded = round(value, 1 - math.floor(math.log10(abs(value))))
    return f"{rounded:,.{max(0, 1 - math.floor(math.log10(abs(rounded))))}f}"


def _best_line(rows: Sequence[ConfigRow]) -> str:
    energy, throughput = best_rows(rows)
    if energy is None and throughput is None:
        return "best: none (no configuration has a succeeded repeat with tokens)"
    parts = []
    if energy is not None:
        parts.append(
            f"lowest energy per token {energy.config_id} "
            f"({_num(energy.energy_per_token_j.mean)} J/token)"
        )
    if throughput is not None:
        parts.append(
            f"highest throughput {throughput.config_id} "
            f"({_num(throughput.tokens_per_s.mean)} tokens/s)"
        )
    return "best: " + "; ".join(parts)
