"""How the diagnosis names a stall, a rank, a place and a count."""

from __future__ import annotations

from toolkit.stall.detector import Stall
from toolkit.stall.records import RankEvidence
from toolkit.stall.words import count, predicate, stall_head, subject


def test_a_stall_is_named_by_its_step_and_how_long() -> None:
    assert stall_head(Stall(812, 41.4, 20.0)) == "stalled at step 812 for 41 s"
    assert stall_head(Stall(None, 95.0, 90.0)) == "stalled before the first step for 95 s"


def test_a_rank_is_named_with_its_node_and_gpu() -> None:
    assert subject(RankEvidence(5, "node03")) == "rank 5 (node03)"
    assert subject(RankEvidence(5, "node03", gpu="2")) == "rank 5 (node03, GPU 2)"
    uuid = "GPU-8f6b2c1e-aaaa-bbbb"
    assert subject(RankEvidence(5, "node03", gpu=uuid)) == "rank 5 (node03, GPU-8f6b2c1e)"


def test_a_place_reads_as_what_its_ranks_do() -> None:
    assert (
        predicate("wait in all_reduce at train.py:70", False)
        == "waits in all_reduce at train.py:70"
    )
    assert (
        predicate("wait in all_reduce at train.py:70", True) == "wait in all_reduce at train.py:70"
    )
    assert predicate("in forward at model.py:12", True) == "are in forward at model.py:12"
    assert predicate("exited", True) == "exited"
    assert predicate("stack unreadable (py-spy: denied)", False) == (
        "has an unreadable stack (py-spy: denied)"
    )
    assert (count(1), count(4096)) == ("1 rank", "4096 ranks")
