"""Grading the load job's result: failed nodes named, load checks, intra-node all-reduce."""

from __future__ import annotations

import pytest

from toolkit.errors import RunDirError
from toolkit.preflight.hardware import load_hardware
from toolkit.preflight.load.intra_checks import load_result_checks, model_limits
from toolkit.preflight.load.job_result import IntraAllReduce, LoadResult, NodeResult, SweepPoint
from toolkit.preflight.load.node import DeviceLoad, NodeLoad
from toolkit.rundir.preflight import Check

CPU = "AMD EPYC 9654 (96 threads)"
H100 = "NVIDIA H100 80GB HBM3"
MiB = 1 << 20


def cpu_node(gemm_tflops: float, busbw_gb_s: float, name: str = "n") -> NodeResult:
    device = DeviceLoad("cpu", CPU, "fp32", gemm_tflops, 20.0, host_copy_skipped="no GPU")
    return NodeResult(
        NodeLoad(name, "bf16", 2.0, 1024, (device,), "no GPU"),
        "",
        sweep("gloo", 2, busbw_gb_s),
    )


def gpu_node(busbw_gb_s: float, gpus: int = 8) -> NodeResult:
    devices = tuple(
        DeviceLoad(f"cuda:{i}", H100, "bf16", 700.0, 2900.0, 54.0, 54.0) for i in range(gpus)
    )
    return NodeResult(
        NodeLoad("g", "bf16", 2.0, 8192, devices), "", sweep("nccl", gpus, busbw_gb_s)
    )


def sweep(backend: str, ranks: int, best_gb_s: float) -> IntraAllReduce:
    """Three sizes, the largest the best, as a sweep below its plateau looks."""
    points = tuple(
        SweepPoint(size, 0.01, best_gb_s * f, best_gb_s * f)
        for size, f in ((MiB, 0.3), (4 * MiB, 0.7), (16 * MiB, 1.0))
    )
    return IntraAllReduce(backend, ranks, points)


def by(checks: list[Check], name: str) -> dict[str, Check]:
    return {c.scope: c for c in checks if c.name == name}


def test_a_node_at_half_the_others_fails_and_is_named() -> None:
    nodes = {f"n{i}": cpu_node(1.0, 2.0) for i in range(1, 6)}
    nodes["n3"] = cpu_node(0.5, 1.0)
    checks = load_result_checks(LoadResult(nodes))
    gemm, intra = by(checks, "load.gemm"), by(checks, "intra.allreduce")
    assert {n for n, c in gemm.items() if c.status != "pass"} == {"n3"}
    assert gemm["n3"].status == "fail"
    assert "50% of the median 1 of 5" in gemm["n3"].measured
    assert {n for n, c in intra.items() if c.status != "pass"} == {"n3"}
    assert intra["n3"].status == "fail"
    assert intra["n3"].measured == (
        "busbw 1 GB/s at 16 MiB, gloo, 2 ranks (50% of the median 2 of 5 nodes alike)"
    )
    assert intra["n3"].hint


def test_all_equal_nodes_pass_every_check() -> None:
    nodes = {f"n{i}": cpu_node(1.0, 2.0) for i in range(1, 5)}
    checks = load_result_checks(LoadResult(nodes))
    assert checks
    assert {c.status for c in checks} == {"pass"}
    assert {c.name for c in checks} == {"load.gemm", "load.membw", "intra.allreduce"}
    assert set(by(checks, "intra.allreduce")) == set(nodes)


def test_a_node_whose_tests_failed_is_a_fail_naming_the_error() -> None:
    nodes = {f"n{i}": cpu_node(1.0, 2.0) for i in range(1, 4)}
    nodes["n4"] = NodeResult(
        load_error="RayTaskError: torch does not import",
        intra=IntraAllReduce("gloo", 2, error="DistBackendError: connection refused"),
    )
    checks = load_result_checks(LoadResult(nodes, missing=("n5",)))
    run = by(checks, "load.run")
    assert set(run) == {"n4", "n5"}
    assert run["n4"].status == "fail"
    assert run["n4"].measured == "the load test failed: RayTaskError: torch does not import"
    assert run["n5"].measured == "not in Ray"
    intra = by(checks, "intra.allreduce")
    assert intra["n4"].status == "fail"
    assert intra["n4"].measured == "gloo, 2 ranks: DistBackendError: connection refused"
    assert "n4" not in by(checks, "load.gemm")
    assert {intra[n].status for n in ("n1", "n2", "n3")} == {"pass"}


def test_one_gpu_nodes_skip_and_peers_are_nodes_alike() -> None:
    nodes = {"g8a": gpu_node(400.0), "g8b": gpu_node(410.0), "g4": gpu_node(150.0, gpus=4)}
    nodes["g1"] = NodeResult(
        gpu_node(0.0, gpus=1).load, "", IntraAllReduce("nccl", 1, skipped="1 GPU")
    )
    intra = by(load_result_checks(LoadResult(nodes)), "intra.allreduce")
    assert intra["g1"].status == "pass"
    assert "skipped" in intra["g1"].measured
    # g4 has no peer with 4 ranks: it is not held to the 8-GPU nodes' median.
    assert intra["g4"].status == "pass"
    assert "median" not in intra["g4"].measured
    assert "of the median 405 of 2 nodes alike" in intra["g8a"].measured


@pytest.mark.parametrize(
    ("busbw_gb_s", "status"), [(400.0, "pass"), (300.0, "warn"), (50.0, "warn")]
)
def test_the_nvlink_limit_of_known_models_only_warns(busbw_gb_s: float, status: str) -> None:
    result = LoadResult({"g1": gpu_node(busbw_gb_s), "g2": gpu_node(busbw_gb_s)})
    limits = model_limits(result, load_hardware())
    assert set(limits) == {H100}
    check = by(load_result_checks(result, limits), "intra.allreduce")["g1"]
    assert check.status == status
    assert "h100-sxm" in check.threshold
    assert "warns only" in check.threshold


def test_the_result_reads_back_and_a_bad_field_is_named() -> None:
    result = LoadResult(
        {"n1": cpu_node(1.0, 2.0), "n2": NodeResult(load_error="no answer within 302 s")},
        missing=("n3",),
    )
    assert LoadResult.from_json(result.to_json()) == result
    data = result.to_json()
    data["nodes"]["n1"]["intra"]["sizes"][0]["busbw_gb_s"] = "fast"
    with pytest.raises(RunDirError, match="busbw_gb_s"):
        LoadResult.from_json(data)
