"""The driver's asks on a real local Ray: set a limit, read the counters, put back.

The node is this machine under the name ``n1`` (its ``rtk_host:n1`` resource, as rtk
up gives every node); its GPUs are the NVML fake's, in a state file the Ray task's
process reads (``RTK_FAKE_NVML``, honoured under pytest only: the variable rides along
into Ray's workers). The ranks' GPUs come from real marker files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO
from fake_nvml import FakeGpu, FakeNvml

from toolkit.power.ask import NodeReport, RankGpu, RayPowerNodes, rank_gpus
from toolkit.ray_resources import host_resource
from toolkit.rundir.markers import MarkerWriter

pytestmark = pytest.mark.ray

UUIDS = ("GPU-00000000-aaaa", "GPU-00000001-bbbb")


@pytest.fixture(scope="module")
def node(ray_available: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A local Ray whose one node is ``n1``; yields the fake's state file."""
    import ray

    root = tmp_path_factory.mktemp("power-ask")
    state = root / "fake-nvml.json"
    FakeNvml([FakeGpu(uuid=u, draw_w=500.0) for u in UUIDS]).fake_save(state)
    saved = dict(os.environ)
    os.environ.update(
        RTK_FAKE_NVML=f"{REPO / 'tests' / 'fake_nvml.py'}:from_state_file",
        FAKE_NVML_STATE=str(state),
        RTK_CLUSTER_DIR=str(root / "cluster"),
        PYTEST_CURRENT_TEST=os.environ.get("PYTEST_CURRENT_TEST", "test_ask"),
    )
    ray.init(address="local", num_cpus=1, resources={host_resource("n1"): 1.0},
             include_dashboard=False,
             logging_level="ERROR", log_to_driver=False)  # fmt: skip
    try:
        yield state
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved)


def _limits_w(state: Path) -> list[float]:
    return [g["power_limit_mw"] / 1000 for g in json.loads(state.read_text())["gpus"]]


def test_a_limit_is_set_counters_read_and_everything_put_back(node: Path) -> None:
    nodes = RayPowerNodes(owner="run-1")
    (report,) = nodes.ask({"n1": {1: 450.0}}, None).values()
    assert isinstance(report, NodeReport) and report.power.errors == ()
    assert [(g.uuid, g.limit_w) for g in report.power.gpus] == [
        (UUIDS[0], 700.0),
        (UUIDS[1], 450.0),
    ]
    assert _limits_w(node) == [700.0, 450.0]
    restore_file = Path(os.environ["RTK_CLUSTER_DIR"]) / "rtk" / "gpu-restore.json"
    assert json.loads(restore_file.read_text())["owner"] == "run-1"
    (later,) = nodes.ask({}, None).values()  # a read: the counters went on counting
    assert isinstance(later, NodeReport)
    before = [g.energy_mj or 0 for g in report.power.gpus]
    after = [g.energy_mj or 0 for g in later.power.gpus]
    assert all(b > a for a, b in zip(before, after, strict=True))
    done = nodes.restore()
    assert list(done) == ["n1"] and not isinstance(done["n1"], str)
    assert _limits_w(node) == [700.0, 700.0] and not restore_file.exists()


def test_each_ranks_gpu_comes_from_its_first_marker(tmp_path: Path) -> None:
    os.environ["RTK_NODE"] = "n1"
    try:
        for rank, local, uuid in ((0, 0, UUIDS[1]), (1, 1, None)):
            writer = MarkerWriter(tmp_path, rank, local, 2, uuid)
            writer.write("run_start")
            writer.close()
    finally:
        del os.environ["RTK_NODE"]
    assert rank_gpus(str(tmp_path), "n1") == (RankGpu(0, 0, UUIDS[1]), RankGpu(1, 1, None))
    assert rank_gpus(str(tmp_path), "n2") == ()
