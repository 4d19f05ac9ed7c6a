"""A power-profiling sweep's results, on sweep directories written here file by file.

Every run gets a ``profile_run.json`` as the runner writes it and, when it left a report,
a ``report/summary.json`` with the report's ``run`` section. Expected means, standard
deviations and Pareto fronts are computed here from the values written (``statistics``),
or checked by hand.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

import matplotlib.image
import pytest
from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.profile.files import write_results
from toolkit.profile.pareto import pareto_front
from toolkit.profile.results import (
    ConfigRow,
    RunResult,
    Spread,
    SweepResultsError,
    aggregate,
    load_runs,
)
from toolkit.profile.table import format_table
from toolkit.telemetry.report import build_report, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TOKENS = 409_600  # tokens of every run


@dataclass
class Run:
    """One run to write: its configuration, repeat, outcome and report figures."""

    axes: dict[str, object]
    repeat: int
    duration_s: float | None = None  # None: the run left no report
    energy_j: float | None = None
    status: str = "succeeded"
    error: str | None = None
    baseline_w: float | None = 100.0

    @property
    def config_id(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.axes.items())


def write_run(sweep: Path, run: Run, layout: str = "runs") -> Path:
    run_id = f"{run.config_id}#{run.repeat}"
    run_dir = sweep / layout / re.sub(r"[^A-Za-z0-9_.=,-]", "_", run_id)
    (run_dir / "report").mkdir(parents=True)
    profile = {
        "v": 1,
        "run_id": run_id,
        "config_id": run.config_id,
        "axes": run.axes,
        "repeat": run.repeat,
        "status": run.status,
        "error": run.error,
        "run_dir": str(run_dir),
        "started_wall_s": 1_795_250_000.0,
        "ended_wall_s": 1_795_250_100.0,
        "baseline": None
        if run.baseline_w is None
        else {"duration_s": 10.0, "power_w": run.baseline_w, "per_node_power_w": {"n1": 50.0}},
        "cooldown": {"duration_s": 12.0, "settled": True, "power_w": 125.0, "temperature_c": 40.0},
    }
    (run_dir / "profile_run.json").write_text(json.dumps(profile))
    if run.duration_s is not None and run.energy_j is not None:
        summary = {
            "v": 1,
            "run": {
                "duration_s": run.duration_s,
                "energy_j": run.energy_j,
                "energy_wh": run.energy_j / 3600,
                "steps": 100,
                "tokens": TOKENS,
                "energy_per_step_j": run.energy_j / 100,
                "energy_per_token_j": run.energy_j / TOKENS,
                "tokens_per_s": TOKENS / run.duration_s,
                "tokens_per_j": TOKENS / run.energy_j,
                "partial": False,
                "restarts": 0,
                "ranks": 2,
            },
            "nodes": {},
            "window": {},
        }
        (run_dir / "report" / "summary.json").write_text(json.dumps(summary))
    return run_dir


# (power_limit_w, batch_size) -> (duration_s, energy_j, baseline_w) of each succeeded repeat.
OK_REPEATS: dict[tuple[int, int], list[tuple[float, float, float]]] = {
    (200, 8): [(100.0, 20_000.0, 98.0), (104.0, 20_600.0, 102.0), (98.0, 19_900.0, 100.0)],
    (200, 16): [(80.0, 18_000.0, 101.0), (82.0, 18_500.0, 99.0)],
    (300, 8): [(90.0, 24_000.0, 100.0), (91.0, 24_300.0, 100.0), (89.5, 23_800.0, 103.0)],
    (300, 16): [(70.0, 21_000.0, 97.0), (71.0, 21_400.0, 99.0)],
}
ALL_FAILED = (100, 8)


def build_sweep(sweep: Path) -> list[Run]:
    runs = []
    for (limit_w, batch), repeats in OK_REPEATS.items():
        for i, (duration_s, energy_j, baseline_w) in enumerate(repeats, start=1):
            axes: dict[str, object] = {"power_limit_w": limit_w, "batch_size": batch}
            runs.append(Run(axes, i, duration_s, energy_j, baseline_w=baseline_w))
    # A failed repeat that still left a report (stopped mid-run): counted, never averaged.
    runs.append(Run({"power_limit_w": 200, "batch_size": 16}, 3, 5.0, 900.0, "failed", "OOM"))
    # A repeat the runner calls succeeded but without a report: counted as failed too.
    runs.append(Run({"power_limit_w": 300, "batch_size": 16}, 3))
    # Every repeat failed.
    limit_w, batch = ALL_FAILED
    runs.append(Run({"power_limit_w": limit_w, "batch_size": batch}, 1, None, None, "failed", "x"))
    runs.append(Run({"power_limit_w": limit_w, "batch_size": batch}, 2, 1.0, 1.0, "failed", "y"))
    for run in runs:
        write_run(sweep, run)
    return runs


def expected(key: tuple[int, int]) -> dict[str, tuple[float, float]]:
    repeats = OK_REPEATS[key]

    def spread(values: list[float]) -> tuple[float, float]:
        return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0

    return {
        "time_s": spread([d for d, _, _ in repeats]),
        "energy_j": spread([e for _, e, _ in repeats]),
        "tokens_per_s": spread([TOKENS / d for d, _, _ in repeats]),
        "energy_per_token_j": spread([e / TOKENS for _, e, _ in repeats]),
        "avg_power_w": spread([e / d for d, e, _ in repeats]),
        "baseline_power_w": spread([b for _, _, b in repeats]),
    }


def key_of(row: ConfigRow) -> tuple[int, int]:
    return int(row.axes["power_limit_w"]), int(row.axes["batch_size"])  # type: ignore[call-overload]


def test_load_keeps_every_run_with_its_status_and_error(tmp_path: Path) -> None:
    written = build_sweep(tmp_path)
    runs = load_runs(tmp_path)
    assert len(runs) == len(written)
    by_id = {r.run_id: r for r in runs}
    oom = by_id["power_limit_w=200,batch_size=16#3"]
    assert (oom.status, oom.error, oom.ok) == ("failed", "OOM", False)
    assert oom.summary is not None and oom.summary.duration_s == 5.0
    no_report = by_id["power_limit_w=300,batch_size=16#3"]
    assert no_report.status == "succeeded" and not no_report.ok
    assert no_report.summary is None and "report/summary.json" in str(no_report.error)
    ok = by_id["power_limit_w=200,batch_size=8#1"]
    assert ok.ok and ok.error is None and ok.run_dir.parent == tmp_path / "runs"
    assert ok.baseline is not None and ok.baseline.per_node_power_w == {"n1": 50.0}
    assert ok.cooldown is not None and ok.cooldown.settled is True
    assert ok.avg_power_w == pytest.approx(20_000.0 / 100.0)
    # Sorted by the axes' values, then repeat.
    keys = [(r.axes["power_limit_w"], r.axes["batch_size"], r.repeat) for r in runs]
    assert keys == sorted(keys)  # type: ignore[type-var]


def test_aggregate_over_succeeded_repeats(tmp_path: Path) -> None:
    build_sweep(tmp_path)
    rows = aggregate(load_runs(tmp_path))
    assert [key_of(r) for r in rows] == sorted([*OK_REPEATS, ALL_FAILED])
    by_key = {key_of(r): r for r in rows}
    for key, repeats in OK_REPEATS.items():
        row = by_key[key]
        assert row.repeats_ok == len(repeats)
        for name, (mean, std) in expected(key).items():
            assert row.metric(name).mean == pytest.approx(mean, rel=1e-12), (key, name)
            assert row.metric(name).std == pytest.approx(std, rel=1e-12, abs=1e-12), (key, name)
            assert row.metric(name).n == len(repeats)
    # The failed repeat (with a report) and the one without a report: counted, not averaged.
    assert by_key[(200, 16)].repeats_failed == 1
    assert by_key[(300, 16)].repeats_failed == 1
    assert by_key[(200, 8)].repeats_failed == 0
    nothing = by_key[ALL_FAILED]
    assert (nothing.repeats_ok, nothing.repeats_failed) == (0, 2)
    assert all(math.isnan(nothing.metric(m).mean) for m in expected((200, 8)))
    assert not nothing.pareto


def test_one_repeat_has_zero_std() -> None:
    assert Spread.of([3.0]) == Spread(3.0, 0.0, 1)
    empty = Spread.of([None, math.nan])
    assert empty.n == 0 and math.isnan(empty.mean) and math.isnan(empty.std)


def point(name: str, time_s: float, energy_j: float) -> ConfigRow:
    blank = Spread(math.nan, math.nan, 0)
    return ConfigRow(
        config_id=name,
        axes={"name": name},
        repeats_ok=1,
        repeats_failed=0,
        tokens_per_s=blank,
        energy_per_token_j=blank,
        avg_power_w=blank,
        time_s=Spread(time_s, 0.0, 1),
        energy_j=Spread(energy_j, 0.0, 1),
        baseline_power_w=blank,
    )


def test_pareto_front_by_hand_with_ties() -> None:
    rows = [
        point("a", 10, 100),
        point("b", 10, 100),  # the same as a: neither dominates, both on the front
        point("c", 10, 120),  # a's time, more energy: dominated by a
        point("d", 20, 50),
        point("e", 15, 80),  # between a and d: on the front
        point("f", 20, 90),  # slower and costlier than e
        point("g", 30, 50),  # d's energy, slower: dominated by d
        point("h", math.nan, math.nan),  # no figures: never on the front
    ]
    assert [r.config_id for r in pareto_front(rows)] == ["a", "b", "e", "d"]


def test_pareto_flags_of_the_sweep(tmp_path: Path) -> None:
    build_sweep(tmp_path)
    rows = aggregate(load_runs(tmp_path))
    means = {k: (expected(k)["time_s"][0], expected(k)["energy_j"][0]) for k in OK_REPEATS}
    # Hand-checked: (300,16) is fastest; (200,16) the cheapest; (200,8) and (300,8) are
    # slower and costlier than (200,16).
    assert means[(300, 16)][0] < means[(200, 16)][0] < means[(300, 8)][0] < means[(200, 8)][0]
    assert means[(200, 16)][1] < min(means[(300, 16)][1], means[(200, 8)][1], means[(300, 8)][1])
    assert {key_of(r) for r in rows if r.pareto} == {(300, 16), (200, 16)}


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_results_files(tmp_path: Path) -> None:
    written = build_sweep(tmp_path)
    runs = load_runs(tmp_path)
    rows = aggregate(runs)
    files = write_results(tmp_path, runs, rows)

    header, lines = read_csv(files.results_csv)
    assert header == [
        "power_limit_w",
        "batch_size",
        *("tokens_per_s_mean", "tokens_per_s_std"),
        *("energy_per_token_j_mean", "energy_per_token_j_std"),
        *("avg_power_w_mean", "avg_power_w_std"),
        *("time_s_mean", "time_s_std"),
        *("energy_j_mean", "energy_j_std"),
        *("baseline_power_w_mean", "baseline_power_w_std"),
        *("repeats_ok", "repeats_failed", "pareto", "pareto_basis", "config_id"),
    ]
    assert len(lines) == len(OK_REPEATS) + 1
    for line in lines:
        key = (int(line["power_limit_w"]), int(line["batch_size"]))
        if key == ALL_FAILED:
            assert line["energy_per_token_j_mean"] == "" and line["time_s_std"] == ""
            assert (line["repeats_ok"], line["repeats_failed"]) == ("0", "2")
            continue
        for name, (mean, std) in expected(key).items():
            assert float(line[f"{name}_mean"]) == pytest.approx(mean, rel=1e-12)
            assert float(line[f"{name}_std"]) == pytest.approx(std, rel=1e-12, abs=1e-12)
        assert line["pareto"] == ("true" if key in {(300, 16), (200, 16)} else "false")
    assert {line["pareto_basis"] for line in lines} == {"(tokens/s, J/token)"}

    header, lines = read_csv(files.runs_csv)
    assert header[:2] == ["power_limit_w", "batch_size"]
    assert {"run_id", "config_id", "repeat", "status", "averaged", "error"} <= set(header)
    assert len(lines) == len(written)
    oom = next(line for line in lines if line["error"] == "OOM")
    assert (oom["status"], oom["averaged"], oom["time_s"]) == ("failed", "false", "5.0")
    assert oom["run_dir"].startswith("runs/")

    document = json.loads(files.results_json.read_text())
    assert len(document["configurations"]) == len(rows) and len(document["runs"]) == len(runs)
    assert document["configurations"][0]["time_s"]["mean"] is None  # all failed: no figures
    assert set(document["pareto"]) == {r.config_id for r in rows if r.pareto}
    assert document["pareto_basis"] == {
        "label": "(tokens/s, J/token)",
        "unit": "token",
        "figures": ["tokens_per_s", "energy_per_token_j"],
        "better": ["higher", "lower"],
        "note": None,
    }
    assert document["best"]["tokens_per_s"] == "power_limit_w=300,batch_size=16"

    assert files.energy_plot_axis == "power_limit_w" and files.notes == []
    assert files.pareto_basis.unit == "token"
    assert files.plots["energy_per_token"].name == "energy_per_token_vs_power_limit.png"
    assert files.plots["pareto_front"] == tmp_path / "plots" / "pareto_front.png"
    for path, size in zip(files.plots.values(), [(500, 1100), (600, 1100)], strict=True):
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        image = matplotlib.image.imread(path)
        assert image.shape[:2] == size and image.shape[2] in (3, 4)
        assert image.std() > 0  # something was drawn


def test_energy_plot_uses_the_first_axis_without_a_power_limit(tmp_path: Path) -> None:
    for batch, strategy, repeat, duration_s in [
        (8, "ddp", 1, 10.0),
        (8, "ddp", 2, 11.0),
        (16, "ddp", 1, 8.0),
        (8, "fsdp", 1, 12.0),
        (16, "fsdp", 1, 9.0),
    ]:
        axes: dict[str, object] = {"batch_size": batch, "strategy": strategy}
        write_run(tmp_path, Run(axes, repeat, duration_s, 300.0 * duration_s))
    runs = load_runs(tmp_path)
    files = write_results(tmp_path, runs, aggregate(runs))
    assert files.energy_plot_axis == "batch_size"
    assert files.plots["energy_per_token"] == (
        tmp_path / "plots" / "energy_per_token_vs_batch_size.png"
    )
    assert any("batch_size" in note for note in files.notes)
    assert matplotlib.image.imread(files.plots["energy_per_token"]).shape[:2] == (500, 1100)


def test_table_has_one_line_per_configuration(tmp_path: Path) -> None:
    build_sweep(tmp_path)
    rows = aggregate(load_runs(tmp_path))
    text = format_table(rows)
    lines = text.splitlines()
    body = lines[1 : lines.index("")]
    assert len(body) == len(rows)
    assert "power_limit_w" in lines[0] and "J/token" in lines[0]
    for row, line in zip(rows, body, strict=True):
        fields = line.split()
        if row.pareto:
            assert fields.pop(0) == "*"
        assert fields[:2] == [str(row.axes["power_limit_w"]), str(row.axes["batch_size"])]
        assert fields[-2:] == [str(row.repeats_ok), str(row.repeats_failed)]
        if key_of(row) == ALL_FAILED:
            assert "±" not in line and fields[2:-2] == ["-"] * 6
        else:
            assert line.count("±") == 6
    # Fixed-width columns: the first spread's ± is at the same place on every line.
    assert len({line.index("±") for line in body if "±" in line}) == 1
    assert lines[-2].endswith("* on the Pareto front of (tokens/s, J/token)")
    best = lines[-1]
    assert best.startswith("best: ")
    assert "lowest energy per token power_limit_w=200,batch_size=16" in best
    assert "highest throughput power_limit_w=300,batch_size=16" in best


def test_depth_one_layout_and_unreadable_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_run(tmp_path, Run({"batch_size": 8}, 1, 10.0, 1000.0), layout=".")
    write_run(tmp_path, Run({"batch_size": 8}, 2, 12.0, 1100.0), layout="runs")
    broken = tmp_path / "runs" / "broken"
    broken.mkdir()
    (broken / "profile_run.json").write_text('{"v": 1, "run_id": ')
    with caplog.at_level(logging.WARNING):
        runs = load_runs(tmp_path)
    assert [r.repeat for r in runs] == [1, 2]
    assert "broken" in caplog.text
    with pytest.raises(SweepResultsError, match="no such sweep directory"):
        load_runs(tmp_path / "nowhere")


def test_reads_a_summary_written_by_rtk_report(tmp_path: Path) -> None:
    fixture = build_run(tmp_path / "runs", RunSpec(nodes=[NodeSpec("node1")]), name="r1")
    report = build_report(fixture.run_dir)
    write_report(report)
    run = Run({"batch_size": 8}, 1)
    profile = {
        "v": 1,
        "run_id": f"{run.config_id}#1",
        "config_id": run.config_id,
        "axes": run.axes,
        "repeat": 1,
        "status": "succeeded",
        "error": None,
        "baseline": None,
        "cooldown": None,
    }
    (fixture.run_dir / "profile_run.json").write_text(json.dumps(profile))
    (loaded,) = load_runs(tmp_path)
    assert isinstance(loaded, RunResult) and loaded.ok
    assert loaded.time_s == pytest.approx(report.run.duration_s)
    assert loaded.energy_j == pytest.approx(report.run.energy_j)
    assert loaded.tokens_per_s == pytest.approx(report.run.tokens_per_s)
    assert loaded.energy_per_token_j == pytest.approx(report.run.energy_per_token_j)
    (row,) = aggregate([loaded])
    assert row.pareto and row.time_s.std == 0.0 and row.baseline_power_w.n == 0
