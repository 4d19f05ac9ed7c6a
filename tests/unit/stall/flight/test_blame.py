"""The collectives joined with the ranks' places: the suspects they add, the one line.

Each rank's collectives come from the Flight Recorder dumps recorded under
``tests/data/flight_recorder`` (three gloo ranks; one a collective behind, or calling
broadcast where the others call all_reduce); its place from its frames, as its node
reads them. The whole of ``diagnose`` runs, as the watchdog runs it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from conftest import REPO

from toolkit.stall.detector import Stall
from toolkit.stall.diagnosis import diagnose
from toolkit.stall.flight.collectives import RankCollectives, rank_collectives
from toolkit.stall.records import (
    SLEEPING,
    STOPPED,
    Frame,
    NodeEvidence,
    RankEvidence,
    append_stall,
    read_stalls,
)

VENV = "/home/alice/proj/.venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"
TRAIN = "/home/alice/proj/train.py"
ALL_REDUCE = (
    Frame("all_reduce", f"{VENV}/torch/distributed/distributed_c10d.py", 2288),
    Frame("wrapper", f"{VENV}/torch/distributed/c10d_logger.py", 83),
    Frame("train", TRAIN, 70),
    Frame("<module>", TRAIN, 120),
)
DATALOADER = (
    Frame("get", f"{STDLIB}/multiprocessing/queues.py", 113),
    Frame("_next_data", f"{VENV}/torch/utils/data/dataloader.py", 1318),
    Frame("__next__", f"{VENV}/torch/utils/data/dataloader.py", 631),
    Frame("train", TRAIN, 88),
    Frame("<module>", TRAIN, 120),
)


def _rank(
    rank: int,
    node: str,
    frames: tuple[Frame, ...],
    state: str = SLEEPING,
    collectives: RankCollectives | None = None,
) -> RankEvidence:
    return RankEvidence(
        rank=rank,
        node=node,
        pid=1000 + rank,
        state=state,
        frames=frames,
        stack_source="py-spy",
        last_event="step_end",
        last_step=40,
        collectives=collectives,
    )


FLIGHT = REPO / "tests" / "data" / "flight_recorder"


def _recorded(scenario: str, rank: int) -> RankCollectives:
    """Rank ``rank``'s collectives in a recorded scenario, as its node sends them."""
    dump = json.loads((FLIGHT / scenario / f"rank{rank}.json").read_text())
    return rank_collectives(rank, dump).recent()


def _three(scenario: str, **special: RankEvidence) -> list[NodeEvidence]:
    """Three nodes of one rank each, every rank at the same line of all_reduce."""
    nodes = []
    for rank in range(3):
        name = f"node{rank + 1}"
        default = _rank(rank, name, ALL_REDUCE, collectives=_recorded(scenario, rank))
        nodes.append(NodeEvidence(name, (special.get(f"r{rank}", default),)))
    return nodes


def test_a_rank_one_collective_behind_at_the_same_line_is_named_by_its_collectives() -> None:
    """Frames alone see three ranks in the same all_reduce; the recorders see rank 2 at #3."""
    without = diagnose(
        [
            NodeEvidence(n.node, tuple(replace(r, collectives=None) for r in n.ranks))
            for n in _three("behind")
        ],
        Stall(40, 41.0, 20.0),
    )
    assert without.suspects == () and "no rank stands out" in without.summary
    diagnosis = diagnose(_three("behind"), Stall(40, 41.0, 20.0))
    assert diagnosis.summary == (
        "stalled at step 40 for 41 s: all_reduce #4 (group 0, 3.9 KiB) waits for rank 2 "
        "(node3), which waits in all_reduce at train.py:70"
    )
    (suspect,) = diagnosis.suspects
    assert (suspect.rank, suspect.node) == (2, "node3")
    assert suspect.reason == "never joined all_reduce #4 (group 0): its last was #3"
    (stuck,) = diagnosis.collectives
    assert (stuck.seq, stuck.missing, stuck.waiting) == (4, {2: 3}, (0, 1))


def test_the_collective_names_where_its_culprit_is_and_the_stopped_rank_comes_first() -> None:
    in_data = _rank(2, "node3", DATALOADER, collectives=_recorded("behind", 2))
    stopped = _rank(1, "node2", ALL_REDUCE, state=STOPPED)  # no recorder answer
    diagnosis = diagnose(_three("behind", r1=stopped, r2=in_data), Stall(40, 41.0, 20.0))
    (stuck,) = diagnosis.collectives
    assert (stuck.missing, stuck.unanswered) == ({2: 3}, (1,))
    assert diagnosis.summary == (
        "stalled at step 40 for 41 s: all_reduce #4 (group 0, 3.9 KiB) waits for rank 1 "
        "(node2), which is stopped (SIGSTOP or a debugger) (and 1 more rank)"
    )
    assert [s.rank for s in diagnosis.suspects] == [1, 2]
    assert diagnosis.suspects[1].reason.startswith("in ")  # the frames' words, kept


def test_a_rank_calling_another_collective_is_named_with_what_it_calls() -> None:
    diagnosis = diagnose(_three("skip"), Stall(40, 41.0, 20.0))
    assert diagnosis.summary == (
        "stalled at step 40 for 41 s: all_reduce #4 (group 0, 3.9 KiB) does not match: "
        "rank 1 (node2) calls broadcast where the others call all_reduce"
    )
    (suspect,) = diagnosis.suspects
    assert suspect.rank == 1
    assert (
        suspect.reason
        == "calls broadcast where the others call all_reduce at all_reduce #4 (group 0)"
    )


def test_the_collectives_round_trip_through_stall_json(tmp_path: Path) -> None:
    nodes = _three("behind")
    diagnosis = diagnose(nodes, Stall(40, 41.0, 20.0))
    path = tmp_path / "stall.json"
    append_stall(path, diagnosis.to_record(nodes, 1.0e9, 2.5))
    (back,) = read_stalls(path)
    assert back.collectives == diagnosis.collectives
    assert back.nodes == tuple(nodes)
    written = json.loads(path.read_text())[0]
    assert (
        written["collectives"][0]["line"]
        == "all_reduce #4 (group 0, 3.9 KiB) waits for rank 2 (at #3)"
    )
    table = {r["rank"]: r["collectives"]["entered"] for n in written["nodes"] for r in n["ranks"]}
    assert table == {0: {"0": 4}, 1: {"0": 4}, 2: {"0": 3}}


def test_a_rank_on_a_node_that_did_not_answer_is_named_by_the_others_records() -> None:
    """node3 lost its link: its rank gave nothing, the others' recorders show whom they
    wait for (the stall suite's network fault)."""
    nodes = _three("behind")[:2] + [NodeEvidence("node3", error="did not answer within 10 s")]
    diagnosis = diagnose(
        nodes, Stall(40, 20.4, 20.0), expected={0: "node1", 1: "node2", 2: "node3"}
    )
    assert diagnosis.summary == (
        "stalled at step 40 for 20 s: all_reduce #4 (group 0, 3.9 KiB) waits for rank 2 "
        "(node3), whose node did not answer"
    )
    assert (diagnosis.suspects[0].node, diagnosis.suspects[0].rank) == ("node3", None)
