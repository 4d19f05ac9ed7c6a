"""A power-profiling sweep's results: every run read back, then one row per configuration.

``load_runs(sweep_dir)`` reads each run's ``profile_run.json`` (written by the runner)
joined with its ``report/summary.json`` (written by ``rtk report``); ``aggregate(runs)``
gives one ``ConfigRow`` per configuration (mean and sample standard deviation over the
succeeded repeats), flagged when on the Pareto front (``pareto.py``: throughput against
energy per unit of work when every configuration counts tokens). ``files.write_results``
writes results.csv, runs.csv, results.json and plots/*.png into the sweep directory;
``table.format_table(rows)`` is the terminal text.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeGuard

from toolkit.errors import RtkError, RunDirError
from toolkit.profile.pareto import OUTPUT_TOKEN, TOKEN, pareto_front
from toolkit.profile.vllm_bench import SUMMARY_FILE as VLLM_SUMMARY
from toolkit.rundir import (
    IdleBaseline,
    IdleCooldown,
    ProfileRunRecord,
    RunDir,
    RunSummary,
    read_run_summary,
)

logger = logging.getLogger(__name__)

SUCCEEDED = "succeeded"
SCHEMA_VERSION = 1  # of results.json
SUMMARY_JSON = str(RunDir("").report_summary)  # as named in messages: report/summary.json
# ConfigRow's figures, in column order; each is a Spread.
METRICS = (
    "tokens_per_s",
    "energy_per_token_j",
    "avg_power_w",
    "time_s",
    "energy_j",
    "baseline_power_w",
)


class SweepResultsError(RtkError):
    """The sweep directory cannot be read."""


@dataclass(frozen=True)
class RunResult:
    """One run of the sweep: what the runner recorded and what its report says.

    Attributes:
        run_id: The runner's id of this run (``<config_id>#<repeat>``).
        config_id: The configuration it is a repeat of.
        axes: Axis name -> value, as the experiment gave it.
        repeat: Which repeat of the configuration.
        status: ``succeeded`` or ``failed`` (as the runner wrote it).
        error: The runner's error; for a succeeded run without a usable report, why.
        run_dir: The directory holding ``profile_run.json``.
        started_wall_s: When the run started (wall clock).
        ended_wall_s: When it ended.
        baseline: Idle power measured before it; None if not measured.
        cooldown: The cooldown after it; None if there was none.
        summary: Its report's figures; None without a readable report.
        output_tokens: Whether its tokens are tokens generated (a vLLM run, which
            leaves ``vllm.json``) rather than tokens trained on.
    """

    run_id: str
    config_id: str
    axes: dict[str, object]
    repeat: int
    status: str
    error: str | None
    run_dir: Path
    started_wall_s: float | None
    ended_wall_s: float | None
    baseline: IdleBaseline | None
    cooldown: IdleCooldown | None
    summary: RunSummary | None
    output_tokens: bool = False

    @property
    def ok(self) -> bool:
        """Whether the run succeeded and has a report: only these are averaged."""
        return self.status == SUCCEEDED and self.summary is not None

    @property
    def time_s(self) -> float | None:
        """The run's duration (the report's window)."""
        return self.summary.duration_s if self.summary else None

    @property
    def energy_j(self) -> float | None:
        """All nodes' energy over the run."""
        return self.summary.energy_j if self.summary else None

    @property
    def tokens_per_s(self) -> float | None:
        """Throughput."""
        return self.summary.tokens_per_s if self.summary else None

    @property
    def energy_per_token_j(self) -> float | None:
        """Energy per token trained on."""
        return self.summary.energy_per_token_j if self.summary else None

    @property
    def avg_power_w(self) -> float | None:
        """Average power of all nodes: ``energy_j / time_s``."""
        if self.energy_j is None or not self.time_s:
            return None
        return self.energy_j / self.time_s

    @property
    def baseline_power_w(self) -> float | None:
        """Idle power measured before the run."""
        return self.baseline.power_w if self.baseline else None

    @property
    def work_unit(self) -> str | None:
        """What its report counts as work: ``token``, ``output token``, or None (no tokens)."""
        if self.summary is None or not self.summary.tokens:
            return None
        return OUTPUT_TOKEN if self.output_tokens else TOKEN


@dataclass(frozen=True)
class Spread:
    """A figure over the repeats: mean, sample standard deviation, how many values.

    ``std`` is 0 with one value; both are NaN with none.
    """

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Spread:
        """The spread of the finite values; None and NaN are left out."""
        xs = [v for v in values if v is not None and math.isfinite(v)]
        if not xs:
            return cls(math.nan, math.nan, 0)
        return cls(statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0, len(xs))


@dataclass(frozen=True)
class ConfigRow:
    """One configuration of the sweep, over its succeeded repeats.

    Attributes:
        config_id: The runner's id of the configuration.
        axes: Axis name -> value.
        repeats_ok: Repeats that succeeded with a report (the ones averaged).
        repeats_failed: The other repeats: failed, or without a report.
        tokens_per_s: Throughput.
        energy_per_token_j: Energy per token.
        avg_power_w: Average power, all nodes (energy over time, per repeat).
        time_s: Duration of a run.
        energy_j: Energy of a run, all nodes.
        baseline_power_w: Idle power measured before each run.
        pareto: Whether no other configuration is as good in both figures of the
            sweep's ``ParetoBasis`` and better in one (means over the repeats).
        work_unit: The unit of work every averaged repeat counts (``RunResult.work_unit``);
            None when one counts none, or they differ.
    """

    config_id: str
    axes: dict[str, object]
    repeats_ok: int
    repeats_failed: int
    tokens_per_s: Spread
    energy_per_token_j: Spread
    avg_power_w: Spread
    time_s: Spread
    energy_j: Spread
    baseline_power_w: Spread
    pareto: bool = False
    work_unit: str | None = None

    def metric(self, name: str) -> Spread:
        """The figure called ``name`` (one of ``METRICS``)."""
        spread: Spread = getattr(self, name)
        return spread


def load_runs(sweep_dir: Path) -> list[RunResult]:
    """Every run under ``sweep_dir`` (any ``**/profile_run.json``), sorted by axes, repeat.

    A failed run, or one without a report, is kept with its status and error. A
    ``profile_run.json`` that cannot be read is left out with a warning in the log.

    Raises:
        SweepResultsError: ``sweep_dir`` is not a directory.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise SweepResultsError(f"{sweep_dir}: no such sweep directory")
    runs = []
    for path in sorted(sweep_dir.glob(f"**/{RunDir(sweep_dir).profile_run.name}")):
        try:
            runs.append(_load_run(path))
        except RunDirError as e:
            logger.warning("%s: left out, cannot be read: %s", path, e)
    order = axis_names(r.axes for r in runs)
    return sorted(runs, key=lambda r: (_axes_key(r.axes, order), r.config_id, r.repeat, r.run_id))


def _load_run(path: Path) -> RunResult:
    record = ProfileRunRecord.read(path)
    layout = RunDir(path.parent)
    error = record.error
    summary, summary_error = _load_summary(layout.report_summary)
    if record.status == SUCCEEDED and summary is None:
        error = summary_error if error is None else f"{error}; {summary_error}"
    return RunResult(
        run_id=record.run_id,
        config_id=record.config_id,
        axes=dict(record.axes),
        repeat=record.repeat,
        status=record.status,
        error=error,
        run_dir=layout.root,
        started_wall_s=record.started_wall_s,
        ended_wall_s=record.ended_wall_s,
        baseline=record.baseline,
        cooldown=record.cooldown,
        summary=summary,
        output_tokens=(layout.root / VLLM_SUMMARY).is_file(),
    )


def _load_summary(path: Path) -> tuple[RunSummary | None, str | None]:
    """The report's run figures, or None and why not."""
    if not path.is_file():
        return None, f"no {SUMMARY_JSON}: the run left no report"
    try:
        return read_run_summary(path), None
    except RunDirError as e:
        return None, f"{SUMMARY_JSON} cannot be read: {e}"


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def axis_names(axes: Iterable[Mapping[str, object]]) -> list[str]:
    """Every axis name, in the order first seen (the experiment's order)."""
    names: dict[str, None] = {}
    for one in axes:
        names.update(dict.fromkeys(one))
    return list(names)


def axis_text(value: object) -> str:
    """An axis value as text: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def value_key(value: object) -> tuple[int, float, str]:
    """Sort key of one axis value: missing first, then numbers by value, then text."""
    if value is None:
        return (0, 0.0, "")
    if _is_number(value):
        return (1, float(value), "")
    return (2, 0.0, axis_text(value))


def _axes_key(axes: Mapping[str, object], order: Sequence[str]) -> list[tuple[int, float, str]]:
    return [value_key(axes.get(name)) for name in order]


def varying_axes(rows: Sequence[ConfigRow]) -> list[str]:
    """The axes whose value differs between configurations."""
    return [
        name
        for name in axis_names(r.axes for r in rows)
        if len({axis_text(r.axes.get(name)) for r in rows}) > 1
    ]


def config_label(row: ConfigRow, axes: Sequence[str]) -> str:
    """``a=1, b=x`` over ``axes``; the config id when ``axes`` is empty."""
    return ", ".join(f"{a}={axis_text(row.axes.get(a))}" for a in axes) or row.config_id


def aggregate(runs: Sequence[RunResult]) -> list[ConfigRow]:
    """One row per configuration, sorted by axis values, Pareto flags set."""
    groups: dict[str, list[RunResult]] = {}
    for run in runs:
        groups.setdefault(run.config_id, []).append(run)
    rows = []
    for config_id, members in groups.items():
        ok = [r for r in members if r.ok]
        units = {r.work_unit for r in ok}
        rows.append(
            ConfigRow(
                config_id=config_id,
                axes=dict(members[0].axes),
                repeats_ok=len(ok),
                repeats_failed=len(members) - len(ok),
                tokens_per_s=Spread.of(r.tokens_per_s for r in ok),
                energy_per_token_j=Spread.of(r.energy_per_token_j for r in ok),
                avg_power_w=Spread.of(r.avg_power_w for r in ok),
                time_s=Spread.of(r.time_s for r in ok),
                energy_j=Spread.of(r.energy_j for r in ok),
                baseline_power_w=Spread.of(r.baseline_power_w for r in ok),
                work_unit=units.pop() if len(units) == 1 else None,
            )
        )
    order = axis_names(r.axes for r in rows)
    rows.sort(key=lambda r: (_axes_key(r.axes, order), r.config_id))
    front = {r.config_id for r in pareto_front(rows)}
    return [replace(r, pareto=r.config_id in front) for r in rows]


def best_rows(rows: Sequence[ConfigRow]) -> tuple[ConfigRow | None, ConfigRow | None]:
    """The row with the lowest energy per token, and the one with the highest throughput."""
    per_token = [r for r in rows if math.isfinite(r.energy_per_token_j.mean)]
    throughput = [r for r in rows if math.isfinite(r.tokens_per_s.mean)]
    return (
        min(per_token, key=lambda r: r.energy_per_token_j.mean, default=None),
        max(throughput, key=lambda r: r.tokens_per_s.mean, default=None),
    )
