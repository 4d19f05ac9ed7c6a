"""The ``localise`` section of the bandwidth job's result: written by the job, read on the host."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolkit.errors import RunDirError
from toolkit.preflight.bandwidth.localise_section import (
    GroupTest,
    LocaliseSection,
    ShownCulprit,
    ShownFlake,
    ShownReading,
    TcpTest,
)
from toolkit.preflight.bandwidth.measure import TcpSendResult
from toolkit.rundir.record_base import record_fields

BAD = ShownReading(0, ("n1", "n2"), "given", 0.48, True)
GOOD = ShownReading(1, ("n3",), "single", 9.9, False)
REFUSED = ShownReading(1, ("n2", "n4"), "part", None, True, "ConnectionRefusedError")
FOUND = LocaliseSection(
    conclusion="localised",
    unit="Gbit/s",
    rounds=1,
    probes=2,
    node_count=4,
    culprits=(ShownCulprit("node", ("n2",), "slow in 2 of 2 tests with it", (BAD, REFUSED)),),
    flakes=(ShownFlake(("n3", "n4"), (GOOD,)),),
    unresolved=(("n1", "n3"),),
    describe=("n2: slow in 2 of 2 tests with it",),
    readings=(BAD, GOOD, REFUSED),
    pairs=(
        TcpTest(1, "n2", "n4", TcpSendResult(error="ConnectionRefusedError")),
        TcpTest(1, "n4", "n2", TcpSendResult(1.0, 1 << 30, 8.59)),
    ),
)


def read(data: object) -> LocaliseSection:
    return LocaliseSection.from_fields(record_fields(data, "localise"))


def test_a_section_round_trips_through_json_in_the_shape_the_job_writes() -> None:
    written = json.loads(json.dumps(FOUND.to_json()))
    assert read(written) == FOUND
    assert list(written) == [
        "conclusion", "unit", "rounds", "probes", "nodes", "culprits", "flakes",
        "unresolved", "describe", "readings", "pairs",
    ]  # fmt: skip
    assert written["readings"][2] == {
        "round": 1,
        "group": ["n2", "n4"],
        "role": "part",
        "value": None,
        "error": "ConnectionRefusedError",
        "bad": True,
    }
    assert written["pairs"] == [
        {"round": 1, "src": "n2", "dst": "n4", "error": "ConnectionRefusedError"},
        {"round": 1, "src": "n4", "dst": "n2", "bytes": 1 << 30, "seconds": 1.0, "gbit_s": 8.59},
    ]


def test_a_stopped_search_is_its_error_and_the_tests_it_ran() -> None:
    stopped = LocaliseSection(
        error="RayActorError: died",
        groups=(GroupTest(1, ("a", "b"), busbw_gb_s=20.5), GroupTest(1, ("c", "d"), error="NCCL")),
    )
    written = stopped.to_json()
    assert written == {
        "error": "RayActorError: died",
        "groups": [
            {"round": 1, "nodes": ["a", "b"], "busbw_gb_s": 20.5},
            {"round": 1, "nodes": ["c", "d"], "error": "NCCL"},
        ],
    }
    assert read(written) == stopped


def test_what_a_section_lacks_reads_as_empty() -> None:
    section = read({"conclusion": "healthy"})
    assert section == LocaliseSection(conclusion="healthy")
    assert section.node_count is None and section.pairs is None and section.groups is None
    culprit = read({"culprits": [{"nodes": ["n2"]}]}).culprits[0]
    assert culprit == ShownCulprit("node", ("n2",))


@pytest.mark.parametrize(
    ("data", "wrong"),
    [
        ({"rounds": "2"}, "localise: rounds: expected an int"),
        ({"culprits": {"n2": 1}}, "localise: culprits: expected a list of objects"),
        ({"culprits": [{"kind": "node"}]}, "localise: culprits: 0: nodes: expected a list of text"),
        ({"unresolved": [["a", 1]]}, "localise: unresolved: 0: expected a list of nodes"),
        ({"readings": [{"group": ["a"], "bad": "yes"}]}, "localise: readings: 0: bad"),
        ({"pairs": [{"round": 1, "src": "a", "dst": "b", "gbit_s": "fast"}]}, "pairs: 0: gbit_s"),
        ({"groups": [{"round": 1}]}, "localise: groups: 0: nodes"),
    ],
)
def test_a_malformed_section_names_the_field(data: dict[str, Any], wrong: str) -> None:
    with pytest.raises(RunDirError) as caught:
        read(data)
    assert wrong in str(caught.value)
