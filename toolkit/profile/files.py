"""A sweep's result files: results.csv, runs.csv, results.json and the plots."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolkit.json_types import JsonObject, JsonValue
from toolkit.profile.pareto import ParetoBasis, pareto_basis, pareto_front
from toolkit.profile.results import (
    METRICS,
    SCHEMA_VERSION,
    ConfigRow,
    RunResult,
    Spread,
    axis_names,
    axis_text,
    best_rows,
)


@dataclass(frozen=True)
class ResultFiles:
    """Where the sweep's results went.

    Attributes:
        directory: The sweep directory.
        results_csv: One row per configuration.
        runs_csv: One row per run.
        results_json: Configurations, Pareto front, best rows and runs, as JSON.
        plots: ``energy_per_token`` and ``pareto_front`` -> PNG.
        energy_plot_axis: The x axis of the energy-per-token plot: ``power_limit_w``, or
            the first axis when the sweep has no power limit axis; None without axes
            (then one point per configuration).
        notes: What the reader should know about the files (e.g. that x axis).
        pareto_basis: The figures the Pareto front is drawn on (named in results.csv's
            ``pareto_basis`` column, results.json's ``pareto_basis`` and the plot).
    """

    directory: Path
    results_csv: Path
    runs_csv: Path
    results_json: Path
    plots: dict[str, Path]
    energy_plot_axis: str | None
    notes: list[str]
    pareto_basis: ParetoBasis


def results_columns(axes: Sequence[str]) -> list[str]:
    """results.csv's header: the axes, each figure's mean and std, counts, Pareto, id.

    ``pareto_basis`` holds the label of the figures the front is drawn on, e.g.
    ``(tokens/s, J/token)``, on every line.
    """
    figures = [f"{m}_{s}" for m in METRICS for s in ("mean", "std")]
    counts = ["repeats_ok", "repeats_failed", "pareto", "pareto_basis", "config_id"]
    return [*axes, *figures, *counts]


RUN_FIGURES = ("time_s", "energy_j", "tokens_per_s", "energy_per_token_j", "avg_power_w")


def runs_columns(axes: Sequence[str]) -> list[str]:
    """runs.csv's header: the axes, the run's identity and outcome, its figures."""
    return [
        *axes,
        *("run_id", "config_id", "repeat", "status", "averaged", "error"),
        *RUN_FIGURES,
        *("tokens", "baseline_power_w", "cooldown_s", "cooldown_settled", "partial"),
        *("restarts", "run_dir"),
    ]


def write_results(
    sweep_dir: Path, runs: Sequence[RunResult], rows: Sequence[ConfigRow]
) -> ResultFiles:
    """Write results.csv, runs.csv, results.json and plots/*.png into ``sweep_dir``."""
    directory = Path(sweep_dir)
    directory.mkdir(parents=True, exist_ok=True)
    axes = axis_names([*(r.axes for r in rows), *(r.axes for r in runs)])
    basis = pareto_basis(rows)
    results_csv, runs_csv = directory / "results.csv", directory / "runs.csv"
    body = [_row_cells(r, axes, basis) for r in rows]
    _write_csv(results_csv, results_columns(axes), body)
    _write_csv(runs_csv, runs_columns(axes), [_run_cells(directory, r, axes) for r in runs])
    # matplotlib is imported here, not with the module: the CLI stays quick to start.
    from toolkit.profile.plots import energy_plot_axis, write_plots

    x_axis = energy_plot_axis(axes)
    notes = []
    if x_axis != "power_limit_w":
        against = f"the first axis, {x_axis}" if x_axis else "each configuration"
        notes.append(f"no power_limit_w axis: energy per token is plotted against {against}")
    plots = write_plots(rows, axes, directory / "plots")
    results_json = directory / "results.json"
    document = _finite(_results_dict(directory, runs, rows, axes, x_axis, basis))
    results_json.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n", "utf-8")
    return ResultFiles(directory, results_csv, runs_csv, results_json, plots, x_axis, notes, basis)


def _write_csv(path: Path, header: list[str], body: list[list[object]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows([[_cell(v) for v in line] for line in body])


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return axis_text(value)


def _row_cells(row: ConfigRow, axes: Sequence[str], basis: ParetoBasis) -> list[object]:
    figures = [x for m in METRICS for x in (row.metric(m).mean, row.metric(m).std)]
    counts = [row.repeats_ok, row.repeats_failed, row.pareto, basis.label, row.config_id]
    return [*(row.axes.get(a) for a in axes), *figures, *counts]


def _run_cells(directory: Path, run: RunResult, axes: Sequence[str]) -> list[object]:
    summary, cooldown = run.summary, run.cooldown
    return [
        *(run.axes.get(a) for a in axes),
        *(run.run_id, run.config_id, run.repeat, run.status, run.ok, run.error),
        *(getattr(run, name) for name in RUN_FIGURES),
        summary.tokens if summary else None,
        run.baseline_power_w,
        cooldown.duration_s if cooldown else None,
        cooldown.settled if cooldown else None,
        summary.partial if summary else None,
        summary.restarts if summary else None,
        _relative(directory, run.run_dir),
    ]


def _relative(directory: Path, path: Path) -> str:
    try:
        return str(path.relative_to(directory))
    except ValueError:
        return str(path)


def _results_dict(
    directory: Path,
    runs: Sequence[RunResult],
    rows: Sequence[ConfigRow],
    axes: list[str],
    x_axis: str | None,
    basis: ParetoBasis,
) -> JsonObject:
    energy, throughput = best_rows(rows)
    return {
        "v": SCHEMA_VERSION,
        "axes": list[JsonValue](axes),
        "energy_plot_axis": x_axis,
        "configurations": [
            {
                "config_id": r.config_id,
                "axes": _json_object(r.axes),
                "repeats_ok": r.repeats_ok,
                "repeats_failed": r.repeats_failed,
                "pareto": r.pareto,
                **{m: _spread(r.metric(m)) for m in METRICS},
            }
            for r in rows
        ],
        "pareto_basis": basis.to_json(),
        "pareto": [r.config_id for r in pareto_front(rows, basis)],
        "best": {
            "energy_per_token_j": energy.config_id if energy else None,
            "tokens_per_s": throughput.config_id if throughput else None,
        },
        "runs": [
            {
                name: _json_value(cell)
                for name, cell in zip(runs_columns([]), _run_cells(directory, r, []), strict=True)
            }
            | {"axes": _json_object(r.axes)}
            for r in runs
        ],
    }


def _spread(spread: Spread) -> JsonObject:
    return {"mean": spread.mean, "std": spread.std, "n": spread.n}


def _json_object(values: Mapping[str, object]) -> JsonObject:
    return {k: _json_value(v) for k, v in values.items()}


def _json_value(value: object) -> JsonValue:
    """A value read from JSON (a run's axes) or a figure, as JSON; a tuple is a list.

    Raises:
        TypeError: ``value`` is not JSON data (as ``json.dumps`` would).
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {str(k): _json_value(v) for k, v in value.items()}
    raise TypeError(f"not JSON data: {value!r}")


def _finite(value: JsonValue) -> JsonValue:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
