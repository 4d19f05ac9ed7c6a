"""A stall at the collective, from real Flight Recorder dumps of stuck gloo ranks.

The dumps under ``tests/data/flight_recorder`` were recorded by its ``record.py``:
three gloo ranks on CPU, three all-reduces, then one rank calls a broadcast instead of
the fourth (``skip``) or never calls it (``behind``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from conftest import REPO

from toolkit.json_types import JsonObject
from toolkit.stall.flight.collectives import diagnose_collectives, rank_collectives

DUMPS = REPO / "tests" / "data" / "flight_recorder"


def dumps(scenario: str) -> dict[int, JsonObject]:
    found = {}
    for path in sorted((DUMPS / scenario).glob("rank*.json")):
        found[int(path.stem.removeprefix("rank"))] = json.loads(path.read_text())
    assert sorted(found) == [0, 1, 2], scenario
    return found


def test_a_rank_that_calls_another_collective_is_named_with_what_it_calls() -> None:
    ranks = [rank_collectives(r, d) for r, d in dumps("skip").items()]
    assert [r.entered for r in ranks] == [{"0": 4}] * 3
    assert [r.finished for r in ranks] == [{"0": 3}] * 3
    (stall,) = diagnose_collectives(ranks)
    assert (stall.group, stall.seq, stall.op, stall.size_bytes) == ("0", 4, "all_reduce", 4000)
    assert stall.missing == {}
    assert stall.mismatched == {1: "broadcast where the others call all_reduce"}
    assert stall.culprits == (1,)
    assert stall.line() == (
        "all_reduce #4 (group 0, 3.9 KiB) does not match: rank 1 calls broadcast where "
        "the others call all_reduce"
    )


def test_a_rank_that_never_joined_is_missing_with_the_last_it_entered() -> None:
    ranks = [rank_collectives(r, d) for r, d in dumps("behind").items()]
    (stall,) = diagnose_collectives(ranks)
    assert (stall.seq, stall.waiting, stall.missing, stall.mismatched) == (4, (0, 1), {2: 3}, {})
    assert stall.line() == "all_reduce #4 (group 0, 3.9 KiB) waits for rank 2 (at #3)"


def test_another_size_or_dtype_in_the_same_slot_is_a_mismatch() -> None:
    changed = copy.deepcopy(dumps("skip"))  # rank 1's fourth: an all-reduce again, of 10
    last = changed[1]["entries"][-1]
    assert isinstance(last, dict)
    last["profiling_name"], last["input_sizes"] = "gloo:all_reduce", [[10]]
    ranks = [rank_collectives(r, d) for r, d in changed.items()]
    (stall,) = diagnose_collectives(ranks)
    assert stall.mismatched == {1: "all_reduce of 10 where the others' is 1000"}
    last["input_sizes"], last["input_dtypes"] = [[1000]], ["BFloat16"]
    (stall,) = diagnose_collectives([rank_collectives(r, d) for r, d in changed.items()])
    assert stall.mismatched == {1: "all_reduce of BFloat16 where the others' is Float"}
    # With a rank missing too, it comes first among the culprits.
    entries = changed[2]["entries"]
    assert isinstance(entries, list)
    changed[2]["entries"] = entries[:-1]
    changed[2]["pg_status"] = {"0": {"last_enqueued_collective": 3, "last_completed_collective": 3}}
    (stall,) = diagnose_collectives([rank_collectives(r, d) for r, d in changed.items()])
    assert stall.missing == {2: 3} and stall.culprits[0] == 2


def test_ranks_that_finished_everything_are_no_stall_and_odd_entries_are_skipped() -> None:
    done = copy.deepcopy(dumps("behind"))
    for dump in done.values():
        dump["pg_status"] = {"0": {"last_enqueued_collective": 3, "last_completed_collective": 3}}
        entries = dump["entries"]
        assert isinstance(entries, list)
        dump["entries"] = [
            e for e in entries if isinstance(e, dict) and e["collective_seq_id"] != 4
        ]
        dump["entries"].append({"profiling_name": 7, "collective_seq_id": "x"})  # another torch's
    assert diagnose_collectives([rank_collectives(r, d) for r, d in done.items()]) == []
    assert rank_collectives(0, {}).entered == {}


def test_the_recorded_files_are_what_record_py_writes(tmp_path: Path) -> None:
    # The scenarios the module docstring names are the ones on disk, each with 3 ranks.
    text = (DUMPS / "record.py").read_text()
    assert 'SCENARIOS = ("skip", "behind")' in text
    assert sorted(p.name for p in DUMPS.iterdir() if p.is_dir()) == ["behind", "skip"]
