"""Shared by the report's tests: ``many``, one report of a 12-node run built once."""

from __future__ import annotations

import pytest
from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.telemetry.report import Report, build_report

NODES = 12


@pytest.fixture(scope="session")
def many(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """12 nodes of 2 GPUs and a host each, with three that stand out.

    node004's sampler dies at 6 s, node006's GPU counters count 40% more than their
    power (its GPUs draw "more"), node008 throttles from 2 s to 8 s.
    """
    nodes = [NodeSpec(f"node{i + 1:03d}", gpus=2) for i in range(NODES)]
    nodes[3] = NodeSpec("node004", gpus=2, lost_at_s=6.0)
    nodes[5] = NodeSpec("node006", gpus=2, counter_scale=1.4)
    nodes[7] = NodeSpec("node008", gpus=2, throttle=[(2.0, 8.0, 0x40)])
    fixture = build_run(tmp_path_factory.mktemp("many"), RunSpec(nodes=nodes))
    report = build_report(fixture.run_dir)
    assert len(report.nodes) == NODES  # the tests count nodes as len(many.nodes)
    return report
