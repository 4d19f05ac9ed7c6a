"""The first failed rank, read from torchrun's own output on its node.

The outputs under tests/data/torchrun_failures are what a node's torchrun printed in
the stall suite's runs (scripts/stall_fault_suite.py) on the sandbox, Ray's prefix
taken off: rank 1 killed with SIGKILL, and rank 1 aborted by gloo on a collective of
another size.
"""

from __future__ import annotations

from conftest import REPO

from toolkit.torchrun.failure import ERROR_CHARS, FailureReader, RankFailure

RECORDED = REPO / "tests" / "data" / "torchrun_failures"


def _read(name: str) -> RankFailure | None:
    reader = FailureReader()
    for line in (RECORDED / name).read_text().splitlines(keepends=True):
        reader.feed(line)
    return reader.failure()


def test_a_rank_killed_by_a_signal() -> None:
    found = _read("sigkill.txt")
    assert found == RankFailure(1, 0, "node2", -9, "SIGKILL", None)
    assert found.describe() == "rank 1 (local_rank 0) failed first: killed by SIGKILL"


def test_a_rank_aborted_by_an_error_it_printed_before_the_summary() -> None:
    found = _read("gloo_size.txt")
    assert found is not None
    assert (found.rank, found.exitcode, found.signal) == (1, -6, "SIGABRT")
    assert found.error is not None
    assert found.error.startswith("[enforce fail at pair.cc:456] op.preamble.length <= op.nbytes")
    text = found.describe()
    assert text.startswith("rank 1 (local_rank 0) failed first: SIGABRT after [enforce fail")
    assert len(text) <= len("rank 1 (local_rank 0) failed first: ") + ERROR_CHARS


def test_a_recorded_error_and_a_rank_prefixed_one() -> None:
    reader = FailureReader()
    lines = [
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "train.py", line 9, in <module>',
        "[rank3]: ValueError: batch 7 is empty",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-11-29_15:50:38",
        "  host      : node4",
        "  rank      : 3 (local_rank: 1)",
        "  exitcode  : 1 (pid: 635)",
        "  error_file: <N/A>",
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        "==========",
    ]
    for line in lines:
        reader.feed(line + "\n")
    found = reader.failure()
    assert found == RankFailure(3, 1, "node4", 1, None, "ValueError: batch 7 is empty")
    assert found.describe() == "rank 3 (local_rank 1) failed first: ValueError: batch 7 is empty"
    # A second summary (another failure later) does not replace the first.
    for line in lines[3:]:
        reader.feed(line.replace("3 (local_rank: 1)", "5 (local_rank: 0)") + "\n")
    assert reader.failure() == found


def test_nothing_failed_says_nothing() -> None:
    reader = FailureReader()
    for line in ("step 0 loss 0.73\n", "[rank0]: epoch 1\n"):
        reader.feed(line)
    assert reader.failure() is None
