"""figures/straggler_causes.py: why the rank that keeps everyone waiting is late.

Synthetic, format-exact run directories (tests/telemetry_fixtures.py) through the whole
report: one rank arrives last at every barrier, and its node's GPU or host reads what a
cause would make it read (or nothing different). Input is read from marked phases,
built here as the marker files give them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.telemetry.report import build_report, format_summary, summary_dict, write_report
from toolkit.telemetry.report.figures.straggler_causes import (
    StretchSignals,
    interval_means,
    scores,
    straggler_causes,
)
from toolkit.telemetry.report.figures.stragglers import RankWaits, Stragglers
from toolkit.telemetry.report.inputs.spans import Phases, SpanPart, join_spans


def three_nodes(straggler: NodeSpec | None = None, **spec: object) -> RunSpec:
    """Three one-GPU nodes; node2 is ``straggler`` (rank 1 arrives last when asked)."""
    node2 = straggler or NodeSpec("node2")
    return RunSpec(
        nodes=[NodeSpec("node1"), node2, NodeSpec("node3")],
        steps=40,
        **spec,  # type: ignore[arg-type]
    )


def test_a_thermally_throttled_gpu_is_named_with_its_clock_and_temperature(
    tmp_path: Path,
) -> None:
    hot = NodeSpec(
        "node2",
        throttle=[(-100.0, 1e6, 0x20)],  # sw_thermal for the whole run
        busy_sm_clock_mhz=1410.0,
        busy_temperature_c=87.0,
    )
    report = build_report(build_run(tmp_path, three_nodes(hot, straggler_rank=1)).run_dir)
    (cause,) = report.causes
    assert (cause.rank, cause.node, cause.gpu_index, cause.cause) == (1, "node2", 0, "thermal")
    assert [f.cause for f in cause.findings] == ["thermal", "clocks"]
    # Every stretch samples the busy GPU and its idle second at the barrier before.
    line = cause.line()
    assert line.startswith("rank 1 (node2 GPU 0) last at 100% of steps: thermal slowdown 100%")
    assert "°C vs" in line and "SM clock" in line and "MHz median" in line
    text = format_summary(report)
    assert "why: rank 1 (node2 GPU 0) last at 100% of steps: thermal slowdown" in text
    causes = summary_dict(report)["stragglers"]["causes"]
    assert [(c["rank"], c["cause"]) for c in causes] == [(1, "thermal")]
    json.dumps(causes)  # JSON as it is
    html = write_report(report).html.read_text()
    row = html[html.index('<table id="causes">') :].split("</table>")[0]
    assert '<td class="l">node2 GPU 0</td><td>8 of 8</td><td class="l">thermal</td>' in row
    assert '<details id="scores">' in html  # the ranks' scores, slowest first


def test_a_lower_power_limit_is_named(tmp_path: Path) -> None:
    capped = NodeSpec("node2", power_limit_w=450.0)
    report = build_report(build_run(tmp_path, three_nodes(capped, straggler_rank=1)).run_dir)
    (cause,) = report.causes
    assert cause.cause == "power_limit"
    assert cause.findings[0].text == "power limit 450 W vs 700 W median"


def test_a_busier_host_is_named_where_the_gpu_reads_as_the_others(tmp_path: Path) -> None:
    nodes = [
        NodeSpec("node1", busy_cpu_util_pct=40.0),
        NodeSpec("node2", busy_cpu_util_pct=99.0),
        NodeSpec("node3", busy_cpu_util_pct=45.0),
    ]
    spec = RunSpec(nodes=nodes, steps=40, straggler_rank=1)
    (cause,) = build_report(build_run(tmp_path, spec).run_dir).causes
    assert cause.cause == "host_cpu"
    assert cause.findings[0].text.startswith("host CPU ")
    assert "% busy vs " in cause.findings[0].text
    assert any(r.startswith("SM clock") for r in cause.ruled_out)  # looked at, alike


def test_a_straggler_with_no_signal_is_unexplained_with_what_was_ruled_out(
    tmp_path: Path,
) -> None:
    report = build_report(build_run(tmp_path, three_nodes(straggler_rank=1)).run_dir)
    (cause,) = report.causes
    assert cause.cause == "unexplained" and cause.findings == []
    ruled = " ".join(cause.ruled_out)
    for looked_at in ("thermal slowdown", "power limit", "SM clock", "host CPU"):
        assert looked_at in ruled
    assert cause.line().startswith("rank 1 (node2 GPU 0) last at 100% of steps: unexplained")
    assert cause.not_measured == ["network (no traffic sensor)"]


def test_a_run_without_a_straggler_claims_no_cause_and_scores_every_rank_alike(
    tmp_path: Path,
) -> None:
    report = build_report(build_run(tmp_path, three_nodes()).run_dir)
    assert report.causes == []
    assert report.slowness is not None and set(report.slowness.run.values()) == {1.0}
    assert "why:" not in format_summary(report)
    assert summary_dict(report)["stragglers"]["causes"] == []


def test_scores_put_the_straggler_below_the_others_over_the_run_and_per_window(
    tmp_path: Path,
) -> None:
    report = build_report(build_run(tmp_path, three_nodes(straggler_rank=1)).run_dir)
    slowness = report.slowness
    assert slowness is not None
    assert slowness.run[0] == slowness.run[2] == 1.0 and slowness.run[1] < 1.0
    assert slowness.windows and all(by[1] < 1.0 for _, _, by in slowness.windows)
    scored = summary_dict(report)["stragglers"]["scores"]
    assert scored["run"]["1"] == slowness.run[1]


def span(
    rank: int, node: str, steps: list[int], enter: list[float], exit_: list[float]
) -> SpanPart:
    return SpanPart(
        step=np.array(steps, dtype=np.int64),
        rank=rank,
        node=np.zeros(len(steps), dtype=np.int64),
        device=np.zeros(len(steps), dtype=np.int64),
        enter_s=np.array(enter),
        exit_s=np.array(exit_),
        names=[node],
        gpus=[None],
    )


def test_a_slow_input_phase_is_named_from_the_marked_data_phases() -> None:
    """Rank 1 spends 0.5 s a step in its data phase where the others spend 0.05 s; the
    barrier after each step lets everyone go at once (ranks without GPUs, no samples)."""
    steps = list(range(1, 11))
    exits = [1.0 * s for s in steps]
    late = {0: 0.45, 1: 0.0, 2: 0.45}  # how long each waits at every barrier
    waits = join_spans(
        [span(r, f"node{r + 1}", steps, [e - late[r] for e in exits], exits) for r in range(3)]
    )
    data_s = {0: 0.05, 1: 0.5, 2: 0.05}
    parts = []
    for r in range(3):
        begins = [e - 1.0 + 0.01 for e in exits]  # just after the previous barrier
        part = span(r, f"node{r + 1}", steps, begins, [b + data_s[r] for b in begins])
        parts.append(SpanPart(**{**part.__dict__, "label": np.zeros(len(steps), dtype=np.int64)}))
    phases = Phases(join_spans(parts), np.zeros(30, dtype=np.int64), ["data"])
    signals = StretchSignals(waits, phases)
    summary = Stragglers(
        barriers=10,
        ranks=[RankWaits(r, f"node{r + 1}", None, 10, late[r] * 10, None, 0) for r in range(3)],
        wait_s=9.0,
        wait_energy_j=0.0,
        share=None,
        last_by_node={"node2": 10},
    )
    summary.ranks[1] = RankWaits(1, "node2", None, 10, 0.0, None, 10)
    (cause,) = straggler_causes(signals, summary)
    assert (cause.rank, cause.cause) == (1, "input")
    assert cause.findings[0].text == "input 0.50 s a step vs 0.05 s median"
    assert cause.line().startswith("rank 1 (node2) last at 100% of steps: input 0.50 s")
    assert scores(signals).run == {0: 1.0, 1: pytest.approx(0.55 / 1.0, abs=0.01), 2: 1.0}


def test_interval_means_take_the_samples_inside_each_interval() -> None:
    t = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    v = np.array([10.0, 20.0, 30.0, 40.0, 50.0])
    means = interval_means(t, v, np.array([0.5, 1.0, 4.5]), np.array([2.5, 1.0, 9.0]))
    assert means[:2].tolist() == [25.0, 20.0] and np.isnan(means[2])
    assert np.isnan(interval_means(np.empty(0), np.empty(0), np.zeros(1), np.ones(1))).all()


def test_under_auto_steps_a_slow_input_is_read_between_a_ranks_steps(tmp_path: Path) -> None:
    """--auto-steps marks no input phase: a step begins at the first forward and ends at
    the optimizer's step, so the time between is the rank's input (its data loader).
    Rank 1 begins every step 0.25 s late and so enters backward late."""
    spec = three_nodes(
        phases=("forward", "backward"),
        steps_from="auto",
        barrier_every=0,
        late_rank=1,
        late_s=0.3,
        input_rank=1,
        input_s=0.25,
    )
    report = build_report(build_run(tmp_path, spec).run_dir)
    (cause,) = report.causes
    assert (cause.rank, cause.cause) == (1, "input")
    assert cause.findings[0].text.startswith("input 0.3")  # its idle 0.1 s and 0.25 s more
    assert "input" in {p.name for p in report.marker_phases}
