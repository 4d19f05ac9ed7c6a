"""NCCL RAS's view of a hung job read, named and kept (tests/data/ncclras: by hand, see its
README), and ``ncclras`` asked as a real process (a script standing in for the binary)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from toolkit.rundir.record_base import record_fields
from toolkit.stall.flight.ras import (
    ABORTED,
    RUNNING,
    RasView,
    parse_ras,
    query_ras,
    ras_lines,
)

DATA = Path(__file__).resolve().parents[3] / "data" / "ncclras"
WORLD = {0: "node1", 1: "node1", 2: "node2", 3: "node2"}


def view(name: str) -> RasView:
    return parse_ras((DATA / name).read_text())


def test_every_answer_kept_here_is_read() -> None:
    for path in sorted(DATA.glob("*.json")):
        assert view(path.name).error is None, path.name


def test_a_rank_one_allreduce_behind_is_named_with_its_node() -> None:
    found = view("behind.json")
    world, pair = found.communicators
    assert (world.size, [r.status for r in world.ranks]) == (4, [RUNNING] * 4)
    assert world.behind() == [("AllReduce", 1630, [2])]
    assert pair.behind() == []
    assert ras_lines(found, WORLD) == [
        "NCCL RAS: rank 2 (node2) issued 1,629 AllReduce where others issued 1,630, in "
        "communicator 0x7a1f93c2d4 (4 ranks)"
    ]


def test_without_the_jobs_ranks_a_rank_is_named_by_its_host() -> None:
    (line,) = ras_lines(view("behind.json"))
    assert line.startswith("NCCL RAS: rank 2 of it (10.0.0.12) issued 1,629 AllReduce")


def test_nccl_2_28_9s_missing_commas_are_repaired_and_a_dead_rank_named() -> None:
    text = (DATA / "missing_2_28_9.json").read_text()
    with pytest.raises(ValueError):
        json.loads(text)  # the form NCCL 2.28.9 prints
    found = parse_ras(text)
    (comm,) = found.communicators
    assert [(m.rank, m.host, m.pid, m.dead) for m in comm.missing] == [(3, "10.0.0.12", 5202, True)]
    assert [r.status for r in comm.ranks] == [RUNNING, ABORTED, RUNNING]
    assert comm.behind() == []  # the aborted rank's count is not a rank behind
    assert ras_lines(found, WORLD) == [
        "NCCL RAS: rank 3 (node2) is considered dead, in communicator 0x5e5e5e5e00 (4 ranks)",
        "NCCL RAS: rank 1 (node1) has aborted communicator 0x5e5e5e5e00 (4 ranks)",
    ]


def test_a_view_is_kept_and_read_back_whole() -> None:
    for name in ("behind.json", "missing_2_28_9.json"):
        found = view(name)
        kept = json.loads(json.dumps(found.to_json()))
        assert RasView.from_fields(record_fields(kept, "ras")) == found


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("not json", "ncclras: output is not JSON"),
        ('{"communicators": {"hash": 1}}', "ncclras: output not in NCCL 2.28's form"),
        ('{"communicators": [{"ranks": []}]}', "ncclras: output not in NCCL 2.28's form"),
    ],
)
def test_an_answer_in_another_form_is_an_error_not_a_crash(text: str, error: str) -> None:
    found = parse_ras(text)
    assert found.communicators == () and (found.error or "").startswith(error)
    assert ras_lines(found) == [f"NCCL RAS: {found.error.removeprefix('ncclras: ')}"]  # type: ignore[union-attr]


def test_many_findings_fit_their_lines() -> None:
    text = (DATA / "behind.json").read_text().replace('"AllReduce": 1630', '"AllReduce": 1631')
    data = json.loads(text)
    comm = data["communicators"][0]
    comm["missing_ranks"] = [
        {"rank": 10 + i, "host": f"10.0.1.{i}", "pid": i, "status": {"unresponsive": True}}
        for i in range(9)
    ]
    lines = ras_lines(parse_ras(json.dumps(data)), limit=4)
    assert len(lines) == 4 and lines[-1] == "NCCL RAS: ... and 7 more (stall.json)"
    assert "does not answer its peers" in lines[0]


def fake_ncclras(tmp_path: Path, body: str) -> str:
    """An executable that stands in for ``ncclras``: it logs its arguments, then ``body``."""
    path = tmp_path / "ncclras"
    path.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\n{body}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_ncclras_is_asked_for_json_within_its_time_at_ncclas_address(tmp_path: Path) -> None:
    binary = fake_ncclras(tmp_path, f"cat {DATA / 'behind.json'}")
    found = query_ras(3, environ={"NCCL_RAS_ADDR": "10.0.0.11:28028"}, binary=binary)
    assert found == view("behind.json")
    assert (tmp_path / "args").read_text().split() == [
        *("-f", "json", "-t", "3", "-h", "10.0.0.11", "-p", "28028")
    ]


def test_a_failing_or_silent_ncclras_is_an_error_line(tmp_path: Path) -> None:
    failing = fake_ncclras(tmp_path, "echo 'connect: Connection refused' >&2; exit 1")
    assert query_ras(1, environ={}, binary=failing) == RasView(
        error="ncclras exited 1: connect: Connection refused"
    )

    def never(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired("ncclras", 3)

    assert query_ras(1, environ={}, run=never, binary="ncclras") == RasView(
        error="ncclras: no answer in 3 s"
    )


def test_without_ncclras_on_the_path_there_is_no_view(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", os.devnull)
    assert query_ras(1) is None
