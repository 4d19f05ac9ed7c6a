"""A rank's Flight Recorder, dumped on request by its marker writer's thread.

Two real gloo ranks write markers and run three all-reduces; rank 1 then never calls the
fourth, and rank 0 waits in it. The test asks for the ranks' collectives as a stall
would (``flight/request``) and reads back what each rank's thread wrote: the diagnosis
names rank 1, missing from all-reduce #4.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO

from toolkit.markers.flight import (
    FlightDumper,
    flight_recorder_dump,
    merge_dumps,
    recording,
    watch,
)
from toolkit.rundir.layout import RunDir
from toolkit.stall.flight.collectives import diagnose_collectives, rank_collectives
from toolkit.stall.node_evidence import node_evidence

RANK = """
import os, sys, time
import torch, torch.distributed as dist
from toolkit import markers
rank, port = int(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
t = torch.ones(100)
for step in range(3):
    with markers.step():
        dist.all_reduce(t)
if rank == 1:
    time.sleep(300)
dist.all_reduce(t)
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(paths: list[Path], deadline_s: float) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if all(p.exists() for p in paths):
            return True
        time.sleep(0.2)
    return False


def test_each_rank_dumps_its_collectives_when_asked_and_the_missing_rank_is_named(
    tmp_path: Path,
) -> None:
    layout = RunDir(tmp_path)
    env = {**os.environ, "RTK_RUN_DIR": str(tmp_path), "TORCH_FR_BUFFER_SIZE": "50"}
    env["PYTHONPATH"] = str(REPO)
    port = _port()
    ranks = [
        subprocess.Popen([sys.executable, "-c", RANK, str(r), str(port)], env=env, cwd=tmp_path)
        for r in range(2)
    ]
    try:
        # Both ranks past their third step: rank 0 waits in #4, rank 1 sleeps.
        steps_done = [layout.marker(r) for r in range(2)]
        assert _wait_for(steps_done, 240), "the ranks wrote no markers"
        end = time.monotonic() + 240
        while time.monotonic() < end:
            text = "".join(p.read_text() for p in steps_done)
            if text.count('"step_end"') >= 6:
                break
            time.sleep(0.2)
        # Each rank's thread said it watches before the stall: its file, no request.
        dumps = [layout.flight_dump(r) for r in range(2)]
        assert [json.loads(p.read_text()) for p in dumps] == [{"request": None}] * 2
        layout.flight_request.parent.mkdir(parents=True, exist_ok=True)
        layout.flight_request.write_text("stall-1\n")
        assert _wait_for_request(dumps, "stall-1", 60), [p.read_text()[:200] for p in dumps]
        read = [json.loads(p.read_text()) for p in dumps]
        (stall,) = diagnose_collectives([rank_collectives(r, d) for r, d in enumerate(read)])
        assert (stall.seq, stall.op, stall.missing, stall.waiting) == (
            4,
            "all_reduce",
            {1: 3},
            (0,),
        )
        # The node's side, as a stall's collection runs it: it asks anew and gathers.
        evidence = node_evidence(str(tmp_path), "local", py_spy=False, flight_request="stall-2")
    finally:
        for process in ranks:
            process.kill()
            process.wait()
    got = {rank.rank: rank.collectives for rank in evidence.ranks}
    assert sorted(got) == [0, 1] and all(c is not None for c in got.values()), evidence
    assert [got[r].entered for r in (0, 1)] == [{"0": 4}, {"0": 3}]  # type: ignore[union-attr]


def _wait_for_request(paths: list[Path], request: str, deadline_s: float) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if all(json.loads(p.read_text()).get("request") == request for p in paths):
                return True
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    return False


def test_a_request_is_answered_once_and_nothing_is_dumped_without_torch_distributed(
    tmp_path: Path,
) -> None:
    layout = RunDir(tmp_path)
    dumper = FlightDumper(layout.flight_request, layout.flight_dump(0))
    assert not dumper.answer()  # no request
    layout.flight_request.parent.mkdir(parents=True)
    layout.flight_request.write_text("a")
    # This test process never initialised torch.distributed: nothing to dump.
    assert flight_recorder_dump() is None
    assert not dumper.answer() and dumper.answered == "a"
    assert not layout.flight_dump(0).exists()
    assert recording({"TORCH_FR_BUFFER_SIZE": "500"})
    assert not recording({}) and not recording({"TORCH_FR_BUFFER_SIZE": "x"})


def test_a_rank_watches_only_where_its_process_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE", raising=False)
    assert watch(tmp_path, 3) is None
    assert not RunDir(tmp_path).flight_dump(3).exists()
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "500")
    dumper = watch(tmp_path, 3)
    assert dumper is not None
    try:  # it says it watches: its file, with no request in it
        assert json.loads(RunDir(tmp_path).flight_dump(3).read_text()) == {"request": None}
    finally:
        dumper.stop()


def test_nccls_and_gloos_rings_merge_with_each_backends_groups_apart() -> None:
    """A process group with both backends (``cuda:nccl,cpu:gloo``) keeps a ring per
    backend, each numbering its own collectives: merged, gloo's groups get its name."""
    recorded = REPO / "tests" / "data" / "flight_recorder"
    nccl = json.loads((recorded / "behind" / "rank0.json").read_text())
    for entry in nccl["entries"]:
        entry["profiling_name"] = entry["profiling_name"].replace("gloo:", "nccl:")
    gloo = json.loads((recorded / "skip" / "rank0.json").read_text())
    empty = {"entries": [], "pg_config": {}, "pg_status": {}}
    assert merge_dumps([]) is None
    assert merge_dumps([empty, gloo]) == gloo  # one ring with entries: as it is
    merged = merge_dumps([nccl, gloo])
    assert merged is not None
    read = rank_collectives(0, merged)
    assert read.entered == {"0": 4, "0/gloo": 4} and read.finished == {"0": 3, "0/gloo": 3}
    assert read.members == {"0": (0, 1, 2), "0/gloo": (0, 1, 2)}
    assert {c.backend for c in read.collectives if c.group == "0/gloo"} == {"gloo"}
    assert {c.backend for c in read.collectives if c.group == "0"} == {"nccl"}
