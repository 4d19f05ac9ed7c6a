"""The sweep's Pareto front is drawn per unit of work (toolkit/profile/pareto.py).

Sweep directories are written here file by file, as the runner and ``rtk report``
write them (``profile_run.json``, ``report/summary.json``, for vLLM ``vllm.json``),
then read back, aggregated, tabled, written and plotted by the real code. Every
expected front is worked out by hand in the test.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from toolkit.profile.files import write_results
from toolkit.profile.pareto import ParetoBasis, pareto_basis, pareto_front
from toolkit.profile.plots import draw_pareto_front
from toolkit.profile.results import ConfigRow, Spread, aggregate, load_runs
from toolkit.profile.table import format_table
from toolkit.profile.vllm_bench import SUMMARY_FILE as VLLM_SUMMARY

STEPS = 40
SEQ_LEN = 512
FALLBACK = (
    "the Pareto front is drawn on (time, energy) per run, which compares like with like"
    " only when every configuration does the same work"
)


@dataclass
class Run:
    """One succeeded repeat: its configuration and what its report says."""

    config: object  # the value of the one axis, "cfg"
    duration_s: float
    energy_j: float
    tokens: int | None  # None: the workload counts none (a plain command)
    repeat: int = 1
    vllm: bool = False  # a vLLM run: leaves vllm.json, its tokens are generated ones


def write_run(sweep: Path, run: Run) -> None:
    run_dir = sweep / "runs" / f"{run.config}-{run.repeat}"
    (run_dir / "report").mkdir(parents=True)
    profile = {
        "v": 1,
        "run_id": f"cfg={run.config}#{run.repeat}",
        "config_id": f"cfg={run.config}",
        "axes": {"cfg": run.config},
        "repeat": run.repeat,
        "status": "succeeded",
        "error": None,
        "baseline": None,
        "cooldown": None,
    }
    (run_dir / "profile_run.json").write_text(json.dumps(profile))
    tokens = run.tokens
    figures = {
        "duration_s": run.duration_s,
        "energy_j": run.energy_j,
        "steps": STEPS,
        "tokens": tokens,
        "energy_per_step_j": run.energy_j / STEPS,
        "energy_per_token_j": run.energy_j / tokens if tokens else None,
        "tokens_per_s": tokens / run.duration_s if tokens else None,
        "tokens_per_j": tokens / run.energy_j if tokens else None,
        "partial": False,
        "restarts": 0,
        "ranks": 1,
    }
    summary = {"v": 1, "run": figures, "nodes": {}, "window": {}}
    (run_dir / "report" / "summary.json").write_text(json.dumps(summary))
    if run.vllm:
        (run_dir / VLLM_SUMMARY).write_text(json.dumps({"v": 1, "output_tokens": tokens}))


def sweep_of(tmp_path: Path, runs: list[Run]) -> list[ConfigRow]:
    for run in runs:
        write_run(tmp_path, run)
    return aggregate(load_runs(tmp_path))


def batch_run(batch: int, tokens_per_s: float, energy_per_token_j: float) -> Run:
    """``STEPS`` steps of ``batch`` sequences, at the throughput and cost given."""
    tokens = STEPS * batch * SEQ_LEN
    return Run(batch, tokens / tokens_per_s, tokens * energy_per_token_j, tokens)


# The sweep: batch 16 is faster and cheaper per token, batch 4 did a quarter of
# the work, so its run is both shorter and cheaper.
BATCH_4 = batch_run(4, 41_178.0, 0.000410)
BATCH_16 = batch_run(16, 75_052.0, 0.000244)


def ids(rows: list[ConfigRow]) -> list[str]:
    return [r.config_id for r in rows]


def flagged(rows: list[ConfigRow]) -> set[str]:
    return {r.config_id for r in rows if r.pareto}


def plot(rows: list[ConfigRow]) -> tuple[str, str, list[float]]:
    """The Pareto plot's title, x label and the x of the front line's points."""
    ax = Figure().add_subplot()
    draw_pareto_front(ax, rows)
    (front,) = [line for line in ax.get_lines() if str(line.get_label()).startswith("Pareto")]
    return ax.get_title(), ax.get_xlabel(), [float(x) for x in front.get_xdata()]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_batch_16_alone_on_the_front_though_batch_4_is_quicker_and_cheaper_per_run(
    tmp_path: Path,
) -> None:
    rows = sweep_of(tmp_path, [BATCH_4, BATCH_16])
    b4, b16 = rows
    # What misled the old front: batch 4's run is shorter and costs less ...
    assert b4.time_s.mean < b16.time_s.mean and b4.energy_j.mean < b16.energy_j.mean
    assert ids(pareto_front(rows, ParetoBasis(None))) == ["cfg=4"]
    # ... but batch 16 is faster and cheaper per token: it alone is on the front.
    assert b16.tokens_per_s.mean > b4.tokens_per_s.mean
    assert b16.energy_per_token_j.mean < b4.energy_per_token_j.mean
    assert pareto_basis(rows) == ParetoBasis("token")
    assert ids(pareto_front(rows)) == ["cfg=16"]
    assert flagged(rows) == {"cfg=16"}

    lines = format_table(rows).splitlines()
    assert lines[1].split()[0] == "4" and lines[2].split()[:2] == ["*", "16"]
    assert lines[-2].endswith("* on the Pareto front of (tokens/s, J/token)")
    assert not any(line.startswith("note:") for line in lines)

    files = write_results(tmp_path, load_runs(tmp_path), rows)
    document = json.loads(files.results_json.read_text())
    assert document["pareto"] == ["cfg=16"]
    assert document["pareto_basis"]["label"] == "(tokens/s, J/token)"
    assert document["pareto_basis"]["figures"] == ["tokens_per_s", "energy_per_token_j"]
    assert [(r["config_id"], r["pareto"]) for r in document["configurations"]] == [
        ("cfg=4", False),
        ("cfg=16", True),
    ]
    csv_rows = read_csv(files.results_csv)
    assert [(r["cfg"], r["pareto"], r["pareto_basis"]) for r in csv_rows] == [
        ("4", "false", "(tokens/s, J/token)"),
        ("16", "true", "(tokens/s, J/token)"),
    ]
    title, x_label, front_x = plot(rows)
    assert title.startswith("Pareto front of (tokens/s, J/token)")
    assert x_label == "throughput (tokens/s)"
    assert front_x == [b16.tokens_per_s.mean]


def test_ties_are_all_on_the_front(tmp_path: Path) -> None:
    tokens = 100_000
    rows = sweep_of(
        tmp_path,
        [
            Run("a", 10.0, 40.0, tokens),  # 10,000 tokens/s, 0.0004 J/token
            Run("b", 20.0, 80.0, 2 * tokens),  # twice a's work at a's rate and cost: a tie
            Run("c", 10.0, 50.0, tokens),  # a's throughput, costlier per token: dominated
            Run("d", 5.0, 60.0, tokens),  # faster and costlier than a: on the front
            Run("e", 12.5, 40.0, tokens),  # a's cost per token, slower: dominated
        ],
    )
    by_id = {r.config_id: r for r in rows}
    assert by_id["cfg=a"].tokens_per_s.mean == by_id["cfg=b"].tokens_per_s.mean
    assert by_id["cfg=a"].energy_per_token_j.mean == by_id["cfg=b"].energy_per_token_j.mean
    # Fastest first; the tie in config id order.
    assert ids(pareto_front(rows)) == ["cfg=d", "cfg=a", "cfg=b"]
    assert flagged(rows) == {"cfg=a", "cfg=b", "cfg=d"}


def test_without_tokens_the_front_falls_back_to_time_and_energy_and_says_so(
    tmp_path: Path,
) -> None:
    rows = sweep_of(
        tmp_path,
        [
            Run("x", 10.0, 1000.0, None),
            Run("y", 12.0, 900.0, None),
            Run("z", 12.0, 1100.0, None),  # y's time, more energy: dominated
        ],
    )
    basis = pareto_basis(rows)
    assert basis.unit is None and basis.label == "(time, energy)"
    assert basis.note == f"no configuration counts tokens: {FALLBACK}"
    assert ids(pareto_front(rows)) == ["cfg=x", "cfg=y"]
    assert flagged(rows) == {"cfg=x", "cfg=y"}

    lines = format_table(rows).splitlines()
    assert lines[-3].endswith("* on the Pareto front of (time, energy)")
    assert lines[-2] == f"note: {basis.note}"

    files = write_results(tmp_path, load_runs(tmp_path), rows)
    document = json.loads(files.results_json.read_text())
    assert document["pareto_basis"] == {
        "label": "(time, energy)",
        "unit": None,
        "figures": ["time_s", "energy_j"],
        "better": ["lower", "lower"],
        "note": basis.note,
    }
    assert {r["pareto_basis"] for r in read_csv(files.results_csv)} == {"(time, energy)"}
    title, x_label, front_x = plot(rows)
    assert title.startswith("Pareto front of (time, energy)")
    assert "no configuration counts tokens" in title.replace("\n", " ")
    assert x_label == "time per run (s)" and front_x == [10.0, 12.0]


def test_some_with_tokens_and_some_without_fall_back_with_the_reason(tmp_path: Path) -> None:
    rows = sweep_of(
        tmp_path,
        [
            BATCH_4,
            BATCH_16,
            Run("cmd", 3.0, 30.0, None),  # a plain command: no tokens
            # One repeat counted tokens, the other did not: this one counts none either.
            Run("half", 3.0, 100.0, 1000, repeat=1),
            Run("half", 3.0, 100.0, None, repeat=2),
        ],
    )
    by_id = {r.config_id: r for r in rows}
    assert by_id["cfg=half"].work_unit is None and by_id["cfg=4"].work_unit == "token"
    basis = pareto_basis(rows)
    assert basis.unit is None and basis.label == "(time, energy)"
    assert basis.note is not None
    assert basis.note == f"2 of 4 configurations count no tokens (cfg=cmd, cfg=half): {FALLBACK}"
    # By hand on (time, energy): batch 4 (1.99 s, 33.6 J) is quicker than cmd (3 s, 30 J)
    # but costlier; batch 16 (4.37 s, 80 J) and half (3 s, 100 J) are dominated by cmd.
    assert ids(pareto_front(rows)) == ["cfg=4", "cfg=cmd"]
    assert flagged(rows) == {"cfg=4", "cfg=cmd"}
    text = format_table(rows)
    assert "* on the Pareto front of (time, energy)\nnote: 2 of 4 configurations" in text


def test_vllm_is_compared_on_output_tokens(tmp_path: Path) -> None:
    rows = sweep_of(
        tmp_path,
        [
            Run("v8", 10.0, 2000.0, 8 * 256 * 3, vllm=True),
            Run("v32", 20.0, 3000.0, 32 * 256 * 3, vllm=True),
        ],
    )
    basis = pareto_basis(rows)
    assert basis == ParetoBasis("output token")
    assert basis.label == "(output tokens/s, J/output token)"
    assert ids(pareto_front(rows)) == ["cfg=v32"]  # twice the rate, 0.375x the J/token
    assert "* on the Pareto front of (output tokens/s, J/output token)" in format_table(rows)
    _, x_label, _ = plot(rows)
    assert x_label == "throughput (output tokens/s)"


def test_tokens_trained_and_tokens_generated_are_not_compared(tmp_path: Path) -> None:
    rows = sweep_of(tmp_path, [BATCH_4, Run("v8", 10.0, 2000.0, 6144, vllm=True)])
    basis = pareto_basis(rows)
    assert basis.unit is None
    assert (
        basis.note == f"the configurations count different units (output token, token): {FALLBACK}"
    )


def row(name: str, repeats_ok: int, work_unit: str | None) -> ConfigRow:
    figure = Spread(1.0, 0.0, 1) if repeats_ok else Spread(math.nan, math.nan, 0)
    return ConfigRow(name, {}, repeats_ok, 0, *[figure] * 6, work_unit=work_unit)


def test_the_note_names_a_few_configurations_and_counts_the_rest() -> None:
    rows = [row("ok", 1, "token"), *(row(f"c{i}", 1, None) for i in range(5))]
    note = pareto_basis(rows).note
    assert note is not None and note.startswith(
        "5 of 6 configurations count no tokens (c0, c1, c2 and 2 more): "
    )


def test_configurations_without_a_succeeded_repeat_do_not_decide_the_basis() -> None:
    # The failed one has no unit, yet the others all count tokens: per token.
    rows = [row("a", 1, "token"), row("b", 2, "token"), row("failed", 0, None)]
    assert pareto_basis(rows) == ParetoBasis("token")
    assert pareto_basis([row("failed", 0, None)]) == ParetoBasis(None)
    assert pareto_front([row("failed", 0, None)]) == []
