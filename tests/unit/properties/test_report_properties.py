"""The report's figures hold to their definitions over synthetic runs of any shape.

Runs of one to a few steps of tens of milliseconds to a second, sampled at 2 to 10 Hz,
on nodes with and without GPUs, with a modelled host, an IPMI host or RAPL, with
barriers or none (tests/telemetry_fixtures.py). For every node and device:

- its average power is at most its peak (a window shorter than the sampling interval
  was the case that broke it: a 5-step run's node averaged 19.5 W against a 19.3 W peak);
- its energy is its average power times the time its energy curve accounts for;
- the window covers every step the markers show, and the run's steps are theirs.
"""

from __future__ import annotations

from pathlib import Path
from tempfile import TemporaryDirectory

import pytest
from hostile_input import examples
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.rundir import read_markers
from toolkit.telemetry.report import build_report

NODES = st.lists(
    st.builds(
        NodeSpec,
        name=st.just("n"),
        gpus=st.integers(0, 2),
        host_power_source=st.sampled_from(["model", "ipmi"]),
        host_rapl=st.booleans(),
    ),
    min_size=1,
    max_size=3,
)


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    nodes=NODES,
    steps=st.integers(1, 6),
    step_s=st.sampled_from([0.05, 0.1, 0.13, 0.25, 0.5, 1.0]),
    idle_s=st.sampled_from([0.0, 0.05, 0.1, 0.3]),
    rate_hz=st.sampled_from([2.0, 4.0, 10.0]),
    barrier_every=st.sampled_from([0, 1, 2]),
)
# The shapes that broke it: one step of one sampling interval (at 10 and at 4 Hz).
@example(
    nodes=[NodeSpec("n", gpus=1)], steps=1, step_s=0.1, idle_s=0.0, rate_hz=10.0, barrier_every=0
)
@example(
    nodes=[NodeSpec("n", gpus=1)], steps=1, step_s=0.25, idle_s=0.1, rate_hz=4.0, barrier_every=0
)
def test_average_power_never_exceeds_the_peak_and_energy_is_average_times_time(
    nodes: list[NodeSpec],
    steps: int,
    step_s: float,
    idle_s: float,
    rate_hz: float,
    barrier_every: int,
) -> None:
    for i, node in enumerate(nodes):
        node.name = f"node{i + 1}"
    spec = RunSpec(
        nodes=nodes,
        steps=steps,
        step_s=step_s,
        idle_s=idle_s,
        rate_hz=rate_hz,
        barrier_every=barrier_every,
    )
    with TemporaryDirectory() as tmp:
        try:
            run_dir = build_run(Path(tmp), spec).run_dir
        except ZeroDivisionError:
            # The fixture cannot schedule a step shorter than one of its ticks.
            return
        report = build_report(run_dir)
        markers = read_markers(run_dir)
    for node in report.nodes.values():
        figures = [(node.name, node.avg_power_w, node.peak_power_w)]
        figures += [(d.device, d.avg_power_w, d.peak_power_w) for d in node.devices.values()]
        for name, avg_w, peak_w in figures:
            if avg_w is not None:
                assert peak_w is not None and avg_w <= peak_w * (1 + 1e-9), (name, avg_w, peak_w)
        for device in node.devices.values():
            if device.avg_power_w is not None:
                assert device.energy_j == pytest.approx(
                    device.avg_power_w * device.energy_covered_s, rel=1e-9, abs=1e-9
                )
    window = report.window
    times = [m.wall_s for m in markers if m.event in ("step_begin", "step_end")]
    assert window.start_s <= min(times) + 1e-6 and max(times) - 1e-6 <= window.end_s
    ends = {m.step for m in markers if m.event == "step_end"}
    assert report.run.steps == len(ends)
