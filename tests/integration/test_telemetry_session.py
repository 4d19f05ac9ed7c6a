"""The telemetry session on a real Ray cluster of two nodes that share one host's /tmp.

Containers on one host, or a shared scratch directory, give several Ray nodes the same
temp directory and often the same host name: their samplers must never write the same
file, and each node's trace must come back whole.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from toolkit.rundir import Manifest, RunDir
from toolkit.rundir.traces import read_table


@pytest.mark.usefixtures("ray_available")
def test_two_nodes_sharing_tmp_keep_separate_traces(tmp_path: Path) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from toolkit.telemetry.cluster_session import TelemetrySession

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        run_dir = tmp_path / "run"
        session = TelemetrySession(run_dir, sensors="host", rate_hz=10.0, clock_rounds=3)
        session.start()
        time.sleep(3.0)
        session.stop()
    finally:
        ray.shutdown()
        cluster.shutdown()
    manifest = Manifest.read(RunDir(run_dir).manifest)
    assert len(manifest.nodes) == 2, manifest.nodes  # same host name, two nodes
    for name, node in manifest.nodes.items():
        assert node.status == "complete", (name, node.error)
        traces = RunDir(run_dir).node_traces(name)
        assert [p.name for p in traces] == ["trace-001.arrows"]
        table = read_table(traces)
        # Each file holds exactly what its own sampler says it wrote: one sampler's
        # file never holds the other's samples (whatever the machine's load made of
        # the 3 s at 10 Hz), and they come in order, none twice.
        assert table.num_rows > 0, name
        assert node.samples_expected == table.num_rows, (name, node.samples_expected)
        wall = table.column("wall_s").to_pylist()
        assert all(a < b for a, b in zip(wall, wall[1:], strict=False)), name
    paths = {p for name in manifest.nodes for p in RunDir(run_dir).node_traces(name)}
    assert len(paths) == 2  # two files, one per node
