"""The load job's pure parts: progress lines, rank shapes, per-node answers, the result line."""

from __future__ import annotations

import json
import shlex

from toolkit.preflight.load.job import Progress, intra_shape, node_results
from toolkit.preflight.load.job_options import LoadJobOptions
from toolkit.preflight.load.job_result import RESULT_PREFIX, IntraAllReduce, LoadResult
from toolkit.preflight.load.node import DeviceLoad, NodeLoad
from toolkit.preflight.measurement_jobs import PreflightJob, job_result
from toolkit.preflight.ray_ranks import RayNode


def load_json() -> dict[str, object]:
    device = DeviceLoad("cpu", "cpu (4 threads)", "fp32", 0.2, 10.0)
    return NodeLoad("host1", "bf16", 1.0, 1024, (device,)).to_json()


def test_a_few_nodes_get_a_line_each() -> None:
    lines: list[str] = []
    progress = Progress("load test", 3, lines.append)
    progress.finished("n1", "1 device(s)", ok=True)
    progress.finished("n2", "failed: boom", ok=False)
    progress.finished("n3", "1 device(s)", ok=True)
    assert lines == [
        "load test n1: 1 device(s)",
        "load test n2: failed: boom",
        "load test n3: 1 device(s)",
    ]


def test_many_nodes_get_counts_at_each_quarter_naming_a_few_failures() -> None:
    lines: list[str] = []
    total = 1000
    progress = Progress("all-reduce", total, lines.append)
    for i in range(total):
        progress.finished(f"n{i}", "ok", ok=i % 100 != 7)
    assert len(lines) == 4
    assert lines[-1] == "all-reduce: 1000/1000 nodes done, 10 failed (n7, n107, n207, ...)"
    assert lines[0].startswith("all-reduce: 250/1000 nodes done")


def test_ranks_per_node_one_per_gpu_or_two_on_the_cpu() -> None:
    def node(resources: dict[str, float]) -> RayNode:
        return RayNode("n1", "ab12", "10.0.0.1", resources)

    assert intra_shape(node({"GPU": 8.0, "CPU": 96.0})) == (8, True)
    assert intra_shape(node({"GPU": 1.0})) == (1, True)
    assert intra_shape(node({"CPU": 4.0})) == (2, False)


def test_each_node_gets_its_figures_or_its_error() -> None:
    broken = load_json()
    broken["devices"] = "none"
    intra = {"n1": IntraAllReduce("gloo", 2, error="timed out")}
    found = node_results(
        ["n1", "n2", "n3", "n4"],
        {"n1": [load_json()], "n2": "no answer within 302 s", "n3": [broken]},
        intra,
    )
    assert found["n1"].load is not None and found["n1"].load.hostname == "host1"
    assert found["n1"].intra == intra["n1"]
    assert found["n2"].load is None and found["n2"].load_error == "no answer within 302 s"
    assert found["n3"].load is None and "devices" in found["n3"].load_error
    assert found["n4"].load_error == "not tested" and found["n4"].intra is None
    assert list(found) == ["n1", "n2", "n3", "n4"]


def test_the_last_result_line_is_the_answer() -> None:
    answer = LoadResult(missing=("n9",)).to_json()
    lines = [
        "rtk load: load test on 1 node(s)",
        RESULT_PREFIX + json.dumps({"nodes": {}, "missing": []}),
        "some warning from a library",
        RESULT_PREFIX + json.dumps(answer),
    ]
    assert job_result(lines, RESULT_PREFIX) == answer
    assert job_result(lines[:1], RESULT_PREFIX) is None


def test_the_entrypoint_carries_the_options_as_one_argument() -> None:
    options = LoadJobOptions(("a b", "it's"), "bf16", 2.0)
    job = PreflightJob(
        "load", "toolkit.preflight.load.job", options.to_json(), "rtk load: ", RESULT_PREFIX
    )
    argv = shlex.split(job.entrypoint("/opt/py env/bin/python"))
    assert argv[:3] == ["/opt/py env/bin/python", "-m", "toolkit.preflight.load.job"]
    assert json.loads(argv[3]) == {"nodes": ["a b", "it's"], "precision": "bf16", "duration_s": 2.0}
    assert LoadJobOptions.from_json(json.loads(argv[3])) == options
