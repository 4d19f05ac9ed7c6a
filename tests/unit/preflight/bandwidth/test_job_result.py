"""The bandwidth job's result (``BandwidthResult``): written by the job, read once on the host."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolkit.errors import RunDirError
from toolkit.preflight.bandwidth.job_result import (
    AllreduceResult,
    BandwidthResult,
    Plateau,
    TcpPair,
)
from toolkit.preflight.bandwidth.localise_section import LocaliseSection
from toolkit.preflight.bandwidth.measure import TcpSendResult
from toolkit.preflight.checks import bandwidth_checks
from toolkit.preflight.load.job_result import SweepPoint

SIZES = (SweepPoint(1 << 20, 0.004, 0.25, 0.44), SweepPoint(1 << 26, 0.08, 0.84, 1.47))
RESULT = BandwidthResult(
    nodes=("n1", "n2", "n3"),
    missing=("n4",),
    tcp=(
        TcpPair.measured("n1", "n2", TcpSendResult(1.0, 1 << 30, 8.59)),
        TcpPair.measured("n2", "n3", TcpSendResult(30.0, error="TimeoutError: timed out"), 2),
        TcpPair("n3", "n1", 1, 9.1),
    ),
    allreduce=AllreduceResult("gloo", 3, 0.5, 1.0, SIZES, attempts=1),
    localise={"tcp": LocaliseSection(conclusion="healthy", unit="Gbit/s", node_count=3, pairs=())},
)


def test_the_result_round_trips_through_the_jobs_json() -> None:
    printed = json.loads(json.dumps(RESULT.to_json()))
    assert BandwidthResult.from_json(printed) == RESULT
    assert printed["tcp"][1] == {
        "src": "n2",
        "dst": "n3",
        "attempts": 2,
        "error": "TimeoutError: timed out",
        "seconds": 30.0,
    }
    reduce = printed["allreduce"]
    assert reduce["plateau"] == {"bytes": 1 << 26, "busbw_gb_s": 1.47, "best_gb_s": 1.47}
    assert RESULT.allreduce is not None and RESULT.allreduce.plateau == Plateau(1 << 26, 1.47, 1.47)
    skipped = AllreduceResult("gloo", 1, error="fewer than 2 ranks: nothing to reduce across")
    assert skipped.to_json() == {
        "backend": "gloo",
        "ranks": 1,
        "floor_gb_s": 0.0,
        "error": "fewer than 2 ranks: nothing to reduce across",
    }
    assert BandwidthResult.from_json({"allreduce": skipped.to_json()}).allreduce == skipped


def test_a_pair_without_an_answer_says_so() -> None:
    assert TcpPair.measured("a", "b", TcpSendResult()).error == "no answer"
    assert TcpPair.measured("a", "b", TcpSendResult(2.0, 8, 1.0)).error is None


def test_the_result_read_back_grades_as_the_one_written() -> None:
    read = BandwidthResult.from_json(json.loads(json.dumps(RESULT.to_json())))
    assert bandwidth_checks(read) == bandwidth_checks(RESULT)
    status = {c.scope: c.status for c in bandwidth_checks(read)}
    assert status["n2->n3"] == status["n4"] == "fail"
    assert status["cluster"] == "pass"


@pytest.mark.parametrize(
    ("change", "wrong"),
    [
        ({"tcp": [{"src": "n1", "dst": "n2", "gbit_s": "fast"}]}, "tcp: 0: gbit_s"),
        ({"tcp": [{"src": "n1"}]}, "tcp: 0: dst: expected text, got None"),
        ({"tcp": {"n1": 1}}, "tcp: expected a list"),
        ({"allreduce": {"backend": "gloo", "ranks": "3"}}, "allreduce: ranks: expected an int"),
        (
            {"allreduce": {"backend": "nccl", "ranks": 2, "sizes": [{"bytes": 4}]}},
            "allreduce: sizes: 0: seconds",
        ),
        ({"missing": "n4"}, "missing: expected a list of text"),
        ({"localise": {"tcp": {"rounds": "2"}}}, "localise: tcp: rounds: expected an int"),
    ],
)
def test_a_malformed_result_names_the_field(change: dict[str, Any], wrong: str) -> None:
    with pytest.raises(RunDirError) as caught:
        BandwidthResult.from_json({**RESULT.to_json(), **change})
    assert str(caught.value).startswith("bandwidth job result: ")
    assert wrong in str(caught.value)
