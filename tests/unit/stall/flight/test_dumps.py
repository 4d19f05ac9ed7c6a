"""A node asks its ranks for their collectives and gathers what they dump.

The ranks here are files, written as ``toolkit.markers.flight``'s thread writes them
(its real thread, against real gloo ranks, is tests/unit/markers/test_flight.py's).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from conftest import REPO

from toolkit.rundir.layout import RunDir
from toolkit.stall.flight import dumps as flight_dumps

RECORDED = REPO / "tests" / "data" / "flight_recorder" / "behind"


def _watching(layout: RunDir, rank: int) -> None:
    """Rank ``rank``'s thread has started: its file, with no request."""
    layout.flight_dump(rank).parent.mkdir(parents=True, exist_ok=True)
    layout.flight_dump(rank).write_text(json.dumps({"request": None}))


def _answer(layout: RunDir, rank: int, request: str) -> None:
    dump = json.loads((RECORDED / f"rank{rank}.json").read_text())
    layout.flight_dump(rank).write_text(json.dumps({**dump, "request": request}))


def _gather(layout: RunDir, ranks: list[int], request: str, wait_s: float) -> dict[int, object]:
    """``gather`` in a thread, which must return within a minute whatever it waits for."""
    found: dict[int, object] = {}
    thread = threading.Thread(
        target=lambda: found.update(
            flight_dumps.gather(layout, ranks, request, time.monotonic() + wait_s)
        )
    )
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "gather never returned"
    return found


def test_the_request_is_written_and_each_watching_rank_is_waited_for(tmp_path: Path) -> None:
    layout = RunDir(tmp_path)
    for rank in (0, 1):
        _watching(layout, rank)
    flight_dumps.ask(layout, "req-1")
    assert layout.flight_request.read_text().strip() == "req-1"
    # Rank 0 answers at once, rank 1 later: gather returns once both have, well before
    # its deadline (a rank that never answers is the next test's).
    _answer(layout, 0, "req-1")
    timer = threading.Timer(0.5, _answer, (layout, 1, "req-1"))
    timer.start()
    found = _gather(layout, [0, 1], "req-1", wait_s=50.0)
    timer.join()
    assert sorted(found) == [0, 1]
    assert found[0].entered == {"0": 4} and found[1].entered == {"0": 4}  # type: ignore[attr-defined]
    assert len(found[0].collectives) <= 16  # type: ignore[attr-defined]


def test_an_earlier_answer_is_not_taken_for_this_request(tmp_path: Path) -> None:
    """A rank that answered an earlier stall and cannot answer this one (stopped since):
    waited for until the deadline, then left out."""
    layout = RunDir(tmp_path)
    _watching(layout, 0)
    _answer(layout, 0, "req-1")
    assert _gather(layout, [0], "req-2", wait_s=0.3) == {}


def test_a_rank_without_a_watching_thread_is_not_waited_for(tmp_path: Path) -> None:
    """No file: the rank has no recorder; gather returns at once, even with an hour's deadline."""
    layout = RunDir(tmp_path)
    assert _gather(layout, [0, 1], "req-1", wait_s=3600.0) == {}


def test_a_run_directory_the_node_cannot_write_is_no_error(tmp_path: Path) -> None:
    blocked = tmp_path / "run"
    blocked.write_text("a file where the run directory should be")
    flight_dumps.ask(RunDir(blocked), "req-1")  # nothing raised: the stall goes on
