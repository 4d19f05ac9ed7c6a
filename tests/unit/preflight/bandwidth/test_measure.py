"""The bandwidth primitives on this machine (real sockets, real gloo), and their grading."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from toolkit.preflight.bandwidth import measure
from toolkit.preflight.bandwidth.job_result import (
    AllreduceResult,
    BandwidthResult,
    Plateau,
    TcpPair,
    plateau,
)
from toolkit.preflight.checks import Thresholds, bandwidth_checks, slow_pairs
from toolkit.preflight.load.job_result import SweepPoint


def test_busbw_follows_nccl_tests() -> None:
    assert measure.busbw(10.0, 2) == pytest.approx(10.0)
    assert measure.busbw(10.0, 4) == pytest.approx(15.0)
    assert measure.busbw(10.0, 1) == 0.0


def test_a_ring_covers_every_node_in_n_tests() -> None:
    assert measure.ring_pairs(["a", "b", "c"]) == [("a", "b"), ("b", "c"), ("c", "a")]
    assert measure.ring_pairs(["a", "b"]) == [("a", "b"), ("b", "a")]
    assert measure.ring_pairs(["a"]) == []


def test_iterations_shrink_with_size_within_bounds() -> None:
    assert measure.iterations(1 << 10) == 20
    assert measure.iterations(1 << 26) == 2
    assert measure.iterations(1 << 24) == 8


def test_tcp_between_a_sender_and_a_sink_counts_delivered_bytes() -> None:
    sink = measure.TcpSink("127.0.0.1")
    try:
        result = measure.tcp_send("127.0.0.1", sink.port, 0.2)
    finally:
        sink.close()
    assert result.error is None, result
    assert result.sent_bytes is not None and result.sent_bytes >= measure.CHUNK_BYTES
    assert result.seconds is not None and result.seconds >= 0.2
    assert result.gbit_s == pytest.approx(result.sent_bytes * 8 / result.seconds / 1e9)
    assert list(result.to_json()) == ["bytes", "seconds", "gbit_s"]


def test_tcp_to_a_closed_port_is_a_result_not_an_exception() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connection refused
        result = measure.tcp_send("127.0.0.1", port, 0.1)
    assert result.gbit_s is None and result.sent_bytes is None
    assert result.error is not None and "ConnectionRefusedError" in result.error
    assert list(result.to_json()) == ["error", "seconds"]


def _sweep(rank: int, world: int, init: str, out: str) -> None:
    import json

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        sizes = measure.allreduce_sweep(dist, torch, torch.device("cpu"), [1 << 12, 1 << 16])
    finally:
        dist.destroy_process_group()
    Path(out, f"{rank}.json").write_text(json.dumps(sizes))


def test_an_allreduce_sweep_on_two_gloo_ranks(tmp_path: Path) -> None:
    import json

    import torch.multiprocessing as mp

    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_sweep, args=(2, init, str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1]  # the slowest rank's time, gathered: the same everywhere
    sizes = ranks[0]
    assert [s["bytes"] for s in sizes] == [1 << 12, 1 << 16]
    for s in sizes:
        assert s["seconds"] > 0
        assert s["algbw_gb_s"] == pytest.approx(s["bytes"] / s["seconds"] / 1e9)
        assert s["busbw_gb_s"] == pytest.approx(s["algbw_gb_s"])  # 2(n-1)/n = 1 for n = 2


def tcp(src: str, dst: str, gbit_s: float | None, attempts: int = 1) -> TcpPair:
    error = "TimeoutError: timed out" if gbit_s is None else None
    return TcpPair(src, dst, attempts, gbit_s, error)


def test_one_slow_pair_among_healthy_ones_fails_by_name() -> None:
    ring = [tcp("n1", "n2", 0.48, attempts=3), tcp("n2", "n3", 18.5), tcp("n3", "n1", 19.7)]
    assert slow_pairs(ring) == {("n1", "n2")}
    checks = {c.scope: c for c in bandwidth_checks(BandwidthResult(tcp=tuple(ring)))}
    assert checks["n1->n2"].status == "fail"
    assert checks["n1->n2"].measured == "0.48 Gbit/s (best of 3)"
    assert checks["n1->n2"].threshold.startswith(">= 9.25 Gbit/s")
    assert checks["n2->n3"].status == checks["n3->n1"].status == "pass"


def test_an_absolute_floor_fails_uniformly_slow_links_and_errors_fail() -> None:
    ring = [tcp("n1", "n2", 0.9), tcp("n2", "n1", 1.0)]
    assert slow_pairs(ring) == set()  # uniform: the relative check alone passes them
    assert slow_pairs(ring, Thresholds(tcp_min_gbit_s=10)) == {("n1", "n2"), ("n2", "n1")}
    broken = [tcp("n1", "n2", None), tcp("n2", "n1", 9.0)]
    assert slow_pairs(broken) == {("n1", "n2")}
    check = bandwidth_checks(BandwidthResult(tcp=tuple(broken)))[0]
    assert (check.status, check.measured) == ("fail", "TimeoutError: timed out")


def test_allreduce_is_graded_at_its_largest_size() -> None:
    sizes = (SweepPoint(1 << 20, 0.005, 0.2, 0.27), SweepPoint(1 << 26, 0.09, 0.74, 0.99))
    result = BandwidthResult(allreduce=AllreduceResult("gloo", 3, sizes=sizes, attempts=1))
    (check,) = bandwidth_checks(result)
    assert check.status == "pass"
    assert check.measured == (
        "busbw 0.990 GB/s, algbw 0.740 GB/s at 64 MiB (gloo, 3 ranks); "
        "plateau from 64 MiB (within 10% of the best, 0.990 GB/s)"
    )
    (strict,) = bandwidth_checks(result, Thresholds(busbw_min_gb_s=5))
    assert strict.status == "fail"
    failed = BandwidthResult(allreduce=AllreduceResult("nccl", 8, error="NCCL error"))
    (check,) = bandwidth_checks(failed)
    assert check.status == "fail" and "NCCL error" in check.measured


def test_sizes_parse_with_binary_units_ascending_and_distinct() -> None:
    assert measure.parse_sizes("1M,16M,256M,1G") == (1 << 20, 1 << 24, 1 << 28, 1 << 30)
    assert measure.parse_sizes(" 64MiB, 4k,1048576,1M ") == (4096, 1 << 20, 1 << 26)
    assert measure.default_sizes("nccl")[-1] == 1 << 30
    assert measure.default_sizes("gloo")[-1] == 1 << 26


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("1.5G", "'1.5G' in '1.5G' is not a size"),
        ("1M,,4M", "'' in '1M,,4M' is not a size"),
        ("10", "'10' in '10' is 10 bytes: a size must be a multiple of 4"),
        ("32G", "'32G' in '32G' is 34359738368 bytes"),
        ("1T", "'1T' in '1T' is not a size"),
    ],
)
def test_a_bad_size_is_named_with_what_is_wanted(text: str, words: str) -> None:
    with pytest.raises(ValueError) as caught:
        measure.parse_sizes(text)
    assert str(caught.value).startswith(words)


def test_busbw_plateaus_at_the_smallest_size_within_ten_percent_of_the_best() -> None:
    curve = [(1, 5.0), (4, 21.0), (16, 60.0), (64, 130.0), (256, 171.0), (1024, 180.0)]
    sizes = [SweepPoint(mib << 20, 1.0, gb_s, gb_s) for mib, gb_s in curve]
    assert plateau(sizes) == Plateau(256 << 20, 171.0, 180.0)
    dip = [*sizes[:-1], SweepPoint(1 << 30, 1.0, 150.0, 150.0)]  # the best need not be last
    assert plateau(dip) == Plateau(256 << 20, 171.0, 171.0)
    assert plateau([]) is None
