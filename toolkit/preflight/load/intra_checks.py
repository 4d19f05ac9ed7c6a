"""Pure grading of the per-node load job's result (``LoadResult``) into checks.

- ``load.run``: a node not in Ray, or whose load test failed, fails with the error;
- ``load.gemm``, ``load.h2d``, ``load.d2h``, ``load.membw``, ``load.throttle``: the
  load tests that ran, graded by ``toolkit.preflight.load.device_checks``;
- ``intra.allreduce``: each node's own all-reduce, its best bus bandwidth against the
  median of the nodes alike (same backend, rank count and device model), with the
  same ``PeerFractions`` as the load checks. On GPU nodes whose model's NVLink limit
  is known (``GpuLimits.nvlink_gb_s``), that limit is applied too, but it only warns:
  the sweep is short (up to 256 MiB), below the sizes where busbw plateaus, so a node
  below it is worth a look, not proof of a fault. A failed all-reduce fails.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from toolkit.preflight.hardware_table import HardwareTable
from toolkit.preflight.load.device_checks import PeerFractions, load_checks
from toolkit.preflight.load.gpu_limits import GpuLimits, gpu_limits
from toolkit.preflight.load.job_result import IntraAllReduce, LoadResult, NodeResult
from toolkit.rundir.preflight import Check, Status

INTRA = "intra.allreduce"
MiB = 1 << 20
_Alike = tuple[str, int, str]


def load_result_checks(
    result: LoadResult,
    limits: Mapping[str, GpuLimits] | None = None,
    peers: PeerFractions = PeerFractions(),  # noqa: B008 - frozen
) -> list[Check]:
    """Every check of the load job's result.

    Args:
        result: The job's answer.
        limits: Device model (``DeviceLoad.model``) -> its limits.
        peers: How far below the median of nodes alike a node may fall.
    """
    checks = [
        Check(
            "load.run",
            node,
            "fail",
            "not in Ray",
            "Ray up on the node",
            "the load test runs as a Ray job: rtk up, then rtk status",
        )
        for node in result.missing
    ]
    for node, answer in sorted(result.nodes.items()):
        if answer.load is None:
            checks.append(
                Check(
                    "load.run",
                    node,
                    "fail",
                    f"the load test failed: {answer.load_error or 'no answer'}",
                    "the load test completes",
                    "see the error; torch must import on the node, and its GPUs be free of "
                    "other Ray work (rtk status)",
                )
            )
    loads = {n: a.load for n, a in result.nodes.items() if a.load is not None}
    checks += load_checks(loads, limits, peers)
    checks += intra_checks(result.nodes, limits, peers)
    return checks


def model_limits(result: LoadResult, table: HardwareTable) -> dict[str, GpuLimits]:
    """Device model -> its limits, for every GPU model in ``result`` the table knows."""
    found: dict[str, GpuLimits] = {}
    for answer in result.nodes.values():
        for d in answer.load.devices if answer.load else ():
            spec = table.match_gpu(d.model) if d.device != "cpu" else None
            if spec is not None and d.model not in found:
                found[d.model] = gpu_limits(table, spec, d.precision)
    return found


def model_of(answer: NodeResult) -> str:
    """The node's device model when its load test ran and all its devices are one model."""
    models = {d.model for d in answer.load.devices} if answer.load else set()
    return models.pop() if len(models) == 1 else ""


def intra_checks(
    nodes: Mapping[str, NodeResult],
    limits: Mapping[str, GpuLimits] | None = None,
    peers: PeerFractions = PeerFractions(),  # noqa: B008 - frozen
) -> list[Check]:
    """One ``intra.allreduce`` check per node, in name order."""
    limits = limits or {}
    values: dict[_Alike, list[float]] = {}
    for answer in nodes.values():
        best = answer.intra.best if answer.intra else None
        if answer.intra is not None and best is not None:
            values.setdefault(_alike(answer, answer.intra), []).append(best.busbw_gb_s)
    medians = {k: (statistics.median(v), len(v)) for k, v in values.items() if len(v) > 1}
    return [
        _intra_check(node, nodes[node], medians, limits.get(model_of(nodes[node])), peers)
        for node in sorted(nodes)
    ]


def _alike(answer: NodeResult, intra: IntraAllReduce) -> _Alike:
    return intra.backend, intra.ranks, model_of(answer)


def _intra_check(
    node: str,
    answer: NodeResult,
    medians: Mapping[_Alike, tuple[float, int]],
    limits: GpuLimits | None,
    peers: PeerFractions,
) -> Check:
    intra = answer.intra
    threshold = f">= {peers.warn_below:.0%} of the median of nodes alike"
    if intra is None:
        return Check(INTRA, node, "fail", "not measured", threshold, "see the job's output")
    shape = f"{intra.backend}, {intra.ranks} ranks"
    if intra.skipped:
        return Check(INTRA, node, "pass", f"{shape}: skipped ({intra.skipped})", ">= 2 ranks")
    best = intra.best
    if intra.error or best is None:
        return Check(
            INTRA,
            node,
            "fail",
            f"{shape}: {intra.error or 'no sizes measured'}",
            "completes",
            "the node's own collective failed: for NCCL check nvidia-smi topo -m, the fabric "
            "manager on NVSwitch systems and NCCL_P2P_DISABLE; for gloo GLOO_SOCKET_IFNAME",
        )
    value = best.busbw_gb_s
    statuses: list[Status] = []
    notes: list[str] = []
    alike = _alike(answer, intra)
    if alike in medians:
        median, count = medians[alike]
        statuses.append(peers.grade(value, median))
        notes.append(f"{value / median:.0%} of the median {median:.4g} of {count} nodes alike")
    nvlink = limits.nvlink_gb_s if limits is not None and intra.backend == "nccl" else None
    if nvlink is not None:
        statuses.append("warn" if nvlink.grade(value) != "pass" else "pass")
        threshold += f"; {nvlink.describe('GB/s')}, warns only: the sweep is short"
    status: Status = "fail" if "fail" in statuses else "warn" if "warn" in statuses else "pass"
    measured = f"busbw {value:.4g} GB/s at {best.size_bytes / MiB:g} MiB, {shape}" + (
        f" ({'; '.join(notes)})" if notes else ""
    )
    hint = (
        ""
        if status == "pass"
        else "the node's GPUs or CPUs exchange data slower than its peers': check NVLink "
        "(nvidia-smi nvlink -s), PCIe links, other processes on the node, and its topology "
        "(nvidia-smi topo -m)"
    )
    return Check(INTRA, node, status, measured, threshold, hint)
