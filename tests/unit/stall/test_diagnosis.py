"""The diagnosis: ranks grouped by where they are, suspects named, one screen at any N."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from toolkit.rundir import RunDir
from toolkit.stall.detector import Stall
from toolkit.stall.diagnosis import compact_ranks, diagnose
from toolkit.stall.flight.ras import parse_ras
from toolkit.stall.records import (
    GONE,
    RUNNING,
    SLEEPING,
    STOPPED,
    Frame,
    NodeEvidence,
    RankEvidence,
    Suspect,
    append_stall,
    read_stalls,
)

VENV = "/home/alice/proj/.venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"
TRAIN = "/home/alice/proj/train.py"
RAS_BEHIND = Path(__file__).resolve().parents[2] / "data" / "ncclras" / "behind.json"


def _pad(*frames: Frame) -> tuple[Frame, ...]:
    return (*frames, Frame("main", TRAIN, 110), Frame("<module>", TRAIN, 120))


ALL_REDUCE = _pad(
    Frame("all_reduce", f"{VENV}/torch/distributed/distributed_c10d.py", 2288),
    Frame("wrapper", f"{VENV}/torch/distributed/c10d_logger.py", 83),
    Frame("train", TRAIN, 70),
)
BARRIER = _pad(
    Frame("barrier", f"{VENV}/torch/distributed/distributed_c10d.py", 4159),
    Frame("wrapper", f"{VENV}/torch/distributed/c10d_logger.py", 83),
    Frame("train", TRAIN, 95),
)
DATALOADER = _pad(
    Frame("wait", f"{STDLIB}/threading.py", 331),
    Frame("get", f"{STDLIB}/multiprocessing/queues.py", 113),
    Frame("_try_get_data", f"{VENV}/torch/utils/data/dataloader.py", 1133),
    Frame("_next_data", f"{VENV}/torch/utils/data/dataloader.py", 1318),
    Frame("__next__", f"{VENV}/torch/utils/data/dataloader.py", 631),
    Frame("train", TRAIN, 88),
)
DDP_BACKWARD = (
    Frame("_engine_run_backward", f"{VENV}/torch/autograd/graph.py", 769),
    Frame("backward", f"{VENV}/torch/autograd/__init__.py", 289),
    Frame("backward", f"{VENV}/torch/_tensor.py", 581),
    Frame("train_step", "/home/alice/proj/train_ddp.py", 61),
    Frame("<module>", "/home/alice/proj/train_ddp.py", 101),
)
WAIT_ALL_REDUCE = "wait in all_reduce at train.py:70"


def _rank(
    rank: int,
    node: str,
    frames: tuple[Frame, ...] = ALL_REDUCE,
    state: str = SLEEPING,
    step: int | None = 812,
    gpu: str | None = None,
    **fields: object,
) -> RankEvidence:
    return RankEvidence(
        rank=rank,
        node=node,
        pid=1000 + rank,
        gpu=gpu,
        state=state,
        frames=frames,
        stack_source="py-spy" if frames else "none",
        last_event="step_end",
        last_step=step,
        **fields,  # type: ignore[arg-type]
    )


def _cluster(nodes: int, gpus: int, step: int = 812, **special: RankEvidence) -> list[NodeEvidence]:
    """``nodes`` nodes of ``gpus`` ranks each, all in all_reduce, but the ranks in ``special``."""
    answers = []
    for n in range(nodes):
        name = f"node{n:02d}"
        ranks = []
        for local in range(gpus):
            rank = n * gpus + local
            default = _rank(rank, name, step=step, gpu=str(local), local_rank=local)
            ranks.append(special.get(f"r{rank}", default))
        answers.append(NodeEvidence(name, tuple(ranks), None, 0.3))
    return answers


def test_three_ranks_with_one_stopped() -> None:
    nodes = [
        NodeEvidence("node1", (_rank(0, "node1", DDP_BACKWARD, step=40),)),
        NodeEvidence("node2", (_rank(1, "node2", ALL_REDUCE, state=STOPPED, step=40),)),
        NodeEvidence("node3", (_rank(2, "node3", DDP_BACKWARD, step=40),)),
    ]
    diagnosis = diagnose(nodes, Stall(40, 31.2, 30.0))
    assert diagnosis.summary == (
        "stalled at step 40 for 31 s: rank 1 (node2) is stopped (SIGSTOP or a debugger); "
        "2 ranks wait in backward (DDP all-reduce) at train_ddp.py:61"
    )
    assert diagnosis.groups == {
        "wait in backward (DDP all-reduce) at train_ddp.py:61": 2,
        "stopped (SIGSTOP or a debugger)": 1,
    }
    assert diagnosis.suspects == (
        Suspect("node2", "stopped (SIGSTOP or a debugger)", 1, Frame("train", TRAIN, 70)),
    )
    assert diagnosis.lines() == [
        diagnosis.summary,
        "  2 ranks wait in backward (DDP all-reduce) at train_ddp.py:61 (ranks 0,2)",
        "  1 rank is stopped (SIGSTOP or a debugger) (rank 1)",
        "suspects, most likely first:",
        "  rank 1 (node2) is stopped (SIGSTOP or a debugger)",
    ]


def test_sixteen_ranks_with_one_in_the_data_pipeline() -> None:
    slow = _rank(5, "node01", DATALOADER, gpu="1", local_rank=1)
    diagnosis = diagnose(_cluster(4, 4, r5=slow), Stall(812, 95.4, 60.0))
    assert diagnosis.summary == (
        "stalled at step 812 for 95 s: rank 5 (node01, GPU 1) is in next(dataloader) "
        "at train.py:88; 15 ranks wait in all_reduce at train.py:70"
    )
    assert diagnosis.groups == {WAIT_ALL_REDUCE: 15, "in next(dataloader) at train.py:88": 1}
    assert diagnosis.suspects == (
        Suspect("node01", "in next(dataloader) at train.py:88", 5, Frame("train", TRAIN, 88)),
    )
    assert diagnosis.lines()[1] == f"  15 ranks {WAIT_ALL_REDUCE} (ranks 0-4,6-15)"


def test_a_rank_in_another_collective_is_the_suspect() -> None:
    odd = _rank(9, "node02", BARRIER, gpu="1")
    diagnosis = diagnose(_cluster(4, 4, r9=odd), Stall(812, 70.0, 60.0))
    assert [(s.rank, s.reason) for s in diagnosis.suspects] == [
        (9, "wait in barrier at train.py:95")
    ]
    assert diagnosis.summary.endswith(
        "rank 9 (node02, GPU 1) waits in barrier at train.py:95; 15 ranks wait in all_reduce at train.py:70"
    )


def test_a_node_that_did_not_answer_is_named_with_its_ranks() -> None:
    nodes = [
        NodeEvidence("node1", (_rank(0, "node1", step=7),)),
        NodeEvidence("node2", (_rank(1, "node2", step=7),)),
        NodeEvidence("node3", (), "no answer in 10 s", 10.0),
    ]
    expected = {0: "node1", 1: "node2", 2: "node3"}
    diagnosis = diagnose(nodes, Stall(7, 62.0, 60.0), expected)
    assert diagnosis.summary == (
        f"stalled at step 7 for 62 s: node3 did not answer (ranks 2); 2 ranks {WAIT_ALL_REDUCE}"
    )
    assert diagnosis.suspects == (Suspect("node3", "did not answer: no answer in 10 s"),)
    assert diagnosis.groups == {WAIT_ALL_REDUCE: 2, "on a node that did not answer": 1}
    assert diagnosis.lines()[-1] == "  node3 did not answer (ranks 2): no answer in 10 s"
    # Without the launch's placement the node is still named, its ranks not.
    bare = diagnose(nodes, Stall(7, 62.0, 60.0))
    assert bare.summary.startswith("stalled at step 7 for 62 s: node3 did not answer; 2 ranks")
    assert bare.groups == {WAIT_ALL_REDUCE: 2}


def test_a_rank_its_node_has_no_trace_of_is_a_suspect() -> None:
    nodes = [NodeEvidence("node1", (_rank(0, "node1"), _rank(1, "node1")))]
    diagnosis = diagnose(nodes, Stall(812, 70.0, 60.0), {0: "node1", 1: "node1", 2: "node1"})
    assert diagnosis.suspects == (Suspect("node1", "not found on its node (no marker files)", 2),)
    assert diagnosis.groups["not found on its node (no marker files)"] == 1


def test_all_4096_ranks_in_the_same_collective_blame_no_rank() -> None:
    diagnosis = diagnose(_cluster(512, 8), Stall(812, 70.0, 60.0))
    assert diagnosis.suspects == ()
    assert diagnosis.summary == (
        f"stalled at step 812 for 70 s: all 4096 ranks {WAIT_ALL_REDUCE}; "
        "no rank stands out: a network or NCCL problem?"
    )
    assert diagnosis.lines() == [
        diagnosis.summary,
        f"  4096 ranks {WAIT_ALL_REDUCE} (ranks 0-4095)",
    ]


def test_ranks_in_several_places_none_waiting_blame_no_rank() -> None:
    user = _pad(Frame("spin", TRAIN, 12))
    nodes = _cluster(1, 4, r0=_rank(0, "node00", user), r1=_rank(1, "node00", user))
    nodes = [NodeEvidence("node00", tuple(_rank(r.rank, r.node, user) for r in nodes[0].ranks))]
    nodes[0] = NodeEvidence("node00", (*nodes[0].ranks[:3], _rank(3, "node00", DATALOADER)))
    diagnosis = diagnose(nodes, Stall(812, 70.0, 60.0))
    assert diagnosis.suspects == ()
    assert diagnosis.summary == (
        "stalled at step 812 for 70 s: 4 ranks in 2 places, most (3) are in spin() "
        "at train.py:12; no rank stands out"
    )


def test_suspects_come_most_likely_first_and_the_summary_counts_the_rest() -> None:
    special = {
        "r1": _rank(1, "node00", DATALOADER, gpu="1"),  # elsewhere
        "r2": _rank(2, "node00", (), RUNNING, gpu="2", stack_error="py-spy timed out"),
        "r3": _rank(3, "node00", ALL_REDUCE, gpu="3", step=811),  # behind
        "r4": _rank(4, "node01", ALL_REDUCE, STOPPED, gpu="0"),
        "r5": _rank(5, "node01", (), GONE, gpu="1"),
    }
    expected = {r: f"node{r // 4:02d}" for r in range(16)}
    diagnosis = diagnose(_cluster(4, 4, **special), Stall(812, 70.0, 60.0), expected)
    assert [(s.node, s.rank, s.reason) for s in diagnosis.suspects] == [
        ("node01", 5, "exited"),
        ("node01", 4, "stopped (SIGSTOP or a debugger)"),
        ("node00", 2, "stack unreadable (py-spy timed out)"),
        ("node00", 1, "in next(dataloader) at train.py:88"),
        ("node00", 3, "behind: last step 811, most ranks 812"),
    ]
    assert diagnosis.summary == (
        "stalled at step 812 for 70 s: rank 5 (node01, GPU 1) exited (and 4 more suspects); "
        f"12 ranks {WAIT_ALL_REDUCE}"
    )
    # A node that did not answer comes after a stopped rank; the exit beside it is no
    # suspect: a silent node ends the others' ranks, a crash does not silence a node.
    nodes = [*_cluster(3, 4, **special), NodeEvidence("node03", (), "no answer in 10 s", 1.0)]
    silent = diagnose(nodes, Stall(812, 70.0, 60.0), expected)
    assert [(s.node, s.rank) for s in silent.suspects] == [
        ("node01", 4),
        ("node03", None),
        ("node00", 2),
        ("node00", 1),
        ("node00", 3),
    ]
    assert silent.groups["on a node that did not answer"] == 4
    assert silent.groups["exited"] == 1
    assert sum(silent.groups.values()) == 16


def test_unreadable_stacks_on_most_ranks_blame_no_rank() -> None:
    unreadable = {
        f"r{r}": _rank(r, "node00", (), RUNNING, stack_error="no py-spy") for r in (0, 1, 2)
    }
    diagnosis = diagnose(_cluster(1, 4, **unreadable), Stall(812, 70.0, 60.0))
    assert diagnosis.suspects == ()
    assert list(diagnosis.groups) == ["stack unreadable (no py-spy)", WAIT_ALL_REDUCE]
    assert diagnosis.summary.endswith(
        "4 ranks in 2 places, most (3) have unreadable stacks (no py-spy); no rank stands out"
    )


def test_a_stall_before_the_first_step() -> None:
    nodes = _cluster(1, 2, step=None)  # type: ignore[arg-type]
    diagnosis = diagnose(nodes, Stall(None, 601.0, 600.0))
    assert diagnosis.summary.startswith("stalled before the first step for 601 s: all 2 ranks")
    assert diagnose([], Stall(None, 601.0, 600.0)).summary == (
        "stalled before the first step for 601 s: no rank gave evidence"
    )


@pytest.mark.parametrize("limit", range(1, 21))
def test_lines_never_exceed_the_limit(limit: int) -> None:
    # 4096 ranks: 300 stopped, 40 places (each a few ranks in user code at its own line).
    special: dict[str, RankEvidence] = {}
    for r in range(0, 300):
        special[f"r{r}"] = _rank(r, f"node{r // 8:02d}", ALL_REDUCE, STOPPED)
    for r in range(300, 340):
        special[f"r{r}"] = _rank(r, f"node{r // 8:02d}", _pad(Frame("f", TRAIN, r)))
    diagnosis = diagnose(_cluster(512, 8, **special), Stall(812, 70.0, 60.0))
    lines = diagnosis.lines(limit)
    assert len(lines) <= limit
    assert lines[0] == diagnosis.summary
    if limit >= 4:
        assert lines[-1].endswith("more (stall.json)")
        assert "suspects, most likely first:" in lines
    assert "(and 339 more suspects)" in diagnosis.summary


def test_lines_show_everything_when_it_fits_and_refuse_no_room() -> None:
    diagnosis = diagnose(_cluster(2, 2, r1=_rank(1, "node00", DATALOADER)), Stall(5, 70.0, 60.0))
    suspect = "  rank 1 (node00) is in next(dataloader) at train.py:88"
    assert diagnosis.lines(5) == [
        diagnosis.summary,
        f"  3 ranks {WAIT_ALL_REDUCE} (ranks 0,2-3)",
        "  1 rank is in next(dataloader) at train.py:88 (rank 1)",
        "suspects, most likely first:",
        suspect,
    ]
    # One line short: the groups give way to the suspects, and are counted.
    assert diagnosis.lines(4) == [
        diagnosis.summary,
        "  ... and 2 more (stall.json)",
        "suspects, most likely first:",
        suspect,
    ]
    assert diagnosis.lines(1) == [diagnosis.summary]
    with pytest.raises(ValueError, match="limit"):
        diagnosis.lines(0)


def test_where_every_frame_looks_the_same_nccl_ras_names_the_rank_behind() -> None:
    """On GPUs every rank may wait at the same line; RAS counts each rank's collectives."""
    nodes = _cluster(2, 2)
    nodes[0] = dataclasses.replace(nodes[0], ras=parse_ras(RAS_BEHIND.read_text()))
    diagnosis = diagnose(nodes, Stall(812, 70.0, 60.0))
    assert diagnosis.suspects == ()
    assert diagnosis.lines() == [
        diagnosis.summary,
        f"  4 ranks {WAIT_ALL_REDUCE} (ranks 0-3)",
        "NCCL RAS: rank 2 (node01) issued 1,629 AllReduce where others issued 1,630, in "
        "communicator 0x7a1f93c2d4 (4 ranks)",
    ]
    assert diagnosis.lines(limit=2) == diagnosis.lines()[:2]  # RAS gets what room is left


def test_the_record_round_trips_through_stall_json(tmp_path: Path) -> None:
    slow = _rank(5, "node01", DATALOADER, gpu="1", local_rank=1)
    nodes = [*_cluster(4, 4, r5=slow), NodeEvidence("node04", (), "no answer in 10 s", 10.0)]
    nodes[0] = dataclasses.replace(nodes[0], ras=parse_ras(RAS_BEHIND.read_text()))
    diagnosis = diagnose(nodes, Stall(812, 95.4, 60.0), {16: "node04"})
    record = diagnosis.to_record(nodes, detected_wall_s=1.7e9, collect_s=10.2, action="report")
    assert (record.step, record.stalled_s, record.timeout_s) == (812, 95.4, 60.0)
    assert record.summary == diagnosis.summary and record.suspects == diagnosis.suspects
    path = RunDir(tmp_path).stall
    append_stall(path, record)
    append_stall(path, record)
    assert read_stalls(path) == [record, record]


@pytest.mark.parametrize(
    ("ranks", "text"),
    [
        ([], ""),
        ([3], "3"),
        ([0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], "0-4,6-15"),
        ([9, 1, 2, 2, 5], "1-2,5,9"),
        (range(0, 200, 2), "0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,38,40,42,..."),
    ],
)
def test_ranks_are_written_as_compact_ranges(ranks: list[int], text: str) -> None:
    assert compact_ranks(ranks) == text


def test_an_earlier_attempts_file_of_a_rank_is_not_blamed() -> None:
    """Rank 2 ran on node1 before a restart (its file there, its process gone) and runs
    on node2 now, waiting with the others: nobody is gone."""
    wait = (Frame("all_reduce", "/v/lib/python3.11/site-packages/torch/distributed/c10d.py", 9),)
    old = RankEvidence(2, "node1", pid=5, state="gone", last_step=201, last_wall_s=100.0)
    now = [
        RankEvidence(r, n, pid=10 + r, state="sleeping", frames=wait, stack_source="py-spy",
                     last_step=529, last_wall_s=500.0)
        for r, n in ((0, "node1"), (1, "node2"), (2, "node2"))
    ]  # fmt: skip
    nodes = [NodeEvidence("node1", (now[0], old)), NodeEvidence("node2", (now[1], now[2]))]
    diagnosis = diagnose(nodes, Stall(529, 30.0, 10.0))
    assert diagnosis.suspects == ()
    assert sum(diagnosis.groups.values()) == 3


def test_a_node_ray_lost_comes_first_and_the_ranks_ray_train_ended_are_not_suspects() -> None:
    """Ray declared node02 dead before the watchdog asked: Ray Train ended the worker
    group, so the other ranks exited because of it; they are shown, not blamed."""
    exited = {f"r{r}": _rank(r, f"node{r // 4:02d}", (), GONE, step=60) for r in range(8)}
    lost = NodeEvidence("node02", (), "Ray lost the node (health check failed)", 0.0)
    nodes = [*_cluster(2, 4, step=60, **exited), lost]
    expected = {r: f"node{r // 4:02d}" for r in range(12)}
    diagnosis = diagnose(nodes, Stall(60, 12.0, 10.0), expected)
    assert diagnosis.suspects == (
        Suspect("node02", "did not answer: Ray lost the node (health check failed)"),
    )
    assert diagnosis.groups == {"exited": 8, "on a node that did not answer": 4}
    assert diagnosis.summary == (
        "stalled at step 60 for 12 s: node02 did not answer (ranks 8-11); 8 ranks exited"
    )
    assert not diagnosis.every_rank_exited
    # A node that only did not answer in time, Ray Train's health check having ended
    # part of the group before Ray declared the node dead (the watchdog looked while it
    # did, CI run of 2026-11-28): the exits are no suspects either, only the node.
    slow = NodeEvidence("node02", (), "did not answer within 10 s", 10.0)
    some = {k: v for k, v in exited.items() if k != "r7"}
    ended = diagnose([*_cluster(2, 4, step=60, **some), slow], Stall(60, 12.0, 10.0), expected)
    assert [s.node for s in ended.suspects] == ["node02"]
    assert ended.groups["exited"] == 7
