"""One node's evidence, from real rank processes and their real marker files.

Ranks (``tests/rank_processes.py``) write markers through ``toolkit.markers`` and wait
at a known line: one waits, one is SIGSTOPped, one has exited. The marker tails and
the choice of a node's ranks are checked on files written here.
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
from fake_nvml import FakeGpu, FakeNvml
from rank_processes import WAIT_FUNCTION, WAIT_LINE, Ranks

from toolkit.rundir import RunDir
from toolkit.rundir.markers import Marker
from toolkit.stall.flight.ras import parse_ras
from toolkit.stall.node_evidence import (
    MarkerTail,
    gpu_readings,
    node_evidence,
    parse_tail,
    ranks_on,
    read_tail,
)
from toolkit.stall.records import GONE, SLEEPING, STOPPED, Frame


def marker(event: str, step: int | None = 0, **fields: object) -> dict[str, object]:
    return {
        "v": 1,
        "event": event,
        "step": step,
        "wall_s": 1.0e9,
        "mono_s": 100.0,
        "node": "node-a",
        "hostname": "host-a",
        "rank": 3,
        "local_rank": 3,
        "world_size": 8,
        "gpu_uuid": "GPU-3",
        "pid": 4242,
        **fields,
    }


def lines(*markers: dict[str, object]) -> bytes:
    return "".join(json.dumps(m) + "\n" for m in markers).encode()


def test_a_waiting_a_stopped_and_an_ended_rank(ranks: Ranks) -> None:
    waiting, stopped = ranks.start(0), ranks.start(1)
    ended = ranks.start(2, exit_after=True)
    ranks.start(5, node="node-b")  # another node's rank: not this node's evidence
    ranks.stop(stopped)
    evidence = node_evidence(str(ranks.run_dir), "node-a", stack_timeout_s=30.0)
    assert evidence.node == "node-a" and evidence.answered and evidence.elapsed_s > 0
    by_rank = {r.rank: r for r in evidence.ranks}
    assert sorted(by_rank) == [0, 1, 2]
    where = Frame(WAIT_FUNCTION, str(ranks.script), WAIT_LINE)
    for rank, pid, state in ((0, waiting, SLEEPING), (1, stopped, STOPPED)):
        seen = by_rank[rank]
        assert (seen.pid, seen.state, seen.stack_source) == (pid, state, "py-spy"), seen
        assert seen.frames[0] == where and seen.stack_error is None
        assert (seen.last_event, seen.last_step, seen.last_phase) == ("phase_begin", 1, "forward")
        assert (seen.node, seen.local_rank, seen.gpu) == ("node-a", rank, None)
    gone = by_rank[2]
    assert (gone.pid, gone.state, gone.frames, gone.stack_source) == (ended, GONE, (), "none")
    assert gone.stack_error == "the process is gone"
    assert (gone.last_event, gone.last_phase) == ("run_end", None)  # it ended: no phase open


def test_faulthandler_only_reads_the_waiting_rank_and_leaves_the_stopped_one(
    ranks: Ranks,
) -> None:
    waiting, stopped = ranks.start(0), ranks.start(1)
    ranks.stop(stopped)
    evidence = node_evidence(str(ranks.run_dir), "node-a", stack_timeout_s=30.0, py_spy=False)
    first, second = evidence.ranks
    assert (first.pid, first.stack_source, first.stack_error) == (waiting, "faulthandler", None)
    assert first.frames[0] == Frame(WAIT_FUNCTION, str(ranks.script), WAIT_LINE)
    assert (second.pid, second.state, second.stack_source) == (stopped, STOPPED, "none")
    assert second.stack_error == "faulthandler: not asked, the process is stopped"
    assert second.frames == ()


def test_a_pid_taken_by_a_later_process_is_gone(tmp_path: Path) -> None:
    # The rank wrote its last marker a minute ago; the pid's process began just now.
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        run = RunDir(tmp_path)
        run.markers_dir.mkdir()
        a_minute_ago = time.monotonic() - 60.0
        run.marker(3).write_bytes(lines(marker("step_end", pid=later.pid, mono_s=a_minute_ago)))
        (seen,) = node_evidence(str(tmp_path), "node-a").ranks
        assert (seen.rank, seen.pid, seen.state, seen.frames) == (3, later.pid, GONE, ())
    finally:
        later.kill()
        later.wait()


def test_a_ranks_gpu_utilisation_and_power_come_with_its_evidence(tmp_path: Path) -> None:
    """The rank's marker names its GPU; NVML (the fake here) says what it does now."""
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        run = RunDir(tmp_path)
        run.markers_dir.mkdir()
        run.marker(3).write_bytes(lines(marker("step_end", pid=later.pid, gpu_uuid="GPU-3")))
        nvml = FakeNvml([FakeGpu("GPU-3", gpu_util_pct=0, average_power_mw=91_000)])
        (seen,) = node_evidence(str(tmp_path), "node-a", nvml=nvml).ranks
        assert (seen.gpu, seen.gpu_util_pct, seen.power_w) == ("GPU-3", 0.0, 91.0)
        # A GPU NVML does not know, or no NVML at all: the evidence goes without.
        assert gpu_readings({"GPU-9"}, nvml) == {}
        assert gpu_readings({"GPU-3"}, FakeNvml(init_error=9)) == {}
    finally:
        later.kill()
        later.wait()


def test_a_node_asked_for_nccl_ras_gives_its_view_where_a_rank_has_a_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ncclras`` on the PATH (a script printing a kept answer) is asked once, with --ras."""
    answer = Path(__file__).resolve().parents[2] / "data" / "ncclras" / "behind.json"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    client = bin_dir / "ncclras"
    client.write_text(f"#!/bin/sh\necho asked >> {tmp_path}/asked\ncat {answer}\n")
    client.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        run = RunDir(tmp_path / "run")
        run.markers_dir.mkdir(parents=True)
        run.marker(3).write_bytes(lines(marker("step_end", pid=later.pid, gpu_uuid="GPU-3")))
        seen = node_evidence(str(run.root), "node-a", nvml=FakeNvml([]), ras=True)
        assert seen.ras == parse_ras(answer.read_text())
        assert node_evidence(str(run.root), "node-a", nvml=FakeNvml([])).ras is None
        run.marker(3).write_bytes(lines(marker("step_end", pid=later.pid, gpu_uuid=None)))
        assert node_evidence(str(run.root), "node-a", ras=True).ras is None  # no GPU here
        assert (tmp_path / "asked").read_text() == "asked\n"
    finally:
        later.kill()
        later.wait()


def test_no_markers_no_ranks(tmp_path: Path) -> None:
    evidence = node_evidence(str(tmp_path / "never-written"), "node-a")
    assert evidence.ranks == () and evidence.answered


def test_a_tail_gives_the_last_marker_and_the_phase_still_open() -> None:
    data = lines(
        marker("run_start", None),
        marker("step_begin", 7),
        marker("phase_begin", 7, name="forward"),
        marker("phase_end", 7, name="forward"),
        marker("phase_begin", 7, name="backward"),
        marker("phase_begin", 7, name="allreduce"),
    )
    tail = parse_tail(data, cut=False)
    assert tail is not None
    assert (tail.last.event, tail.last.step, tail.phase) == ("phase_begin", 7, "allreduce")
    closed = parse_tail(data + lines(marker("phase_end", 7, name="backward")), cut=False)
    assert closed is not None and closed.phase is None  # the outer end closes the inner one too
    torn = parse_tail(data + b'{"v": 1, "event": "step_e', cut=False)
    assert torn is not None and torn.last == tail.last  # a torn last line is skipped
    # A cut first line (the tail began mid-line) is dropped, not misread.
    cut = parse_tail(b'm": "x"}\n' + lines(marker("step_end", 8)), cut=True)
    assert cut is not None and (cut.last.event, cut.last.step) == ("step_end", 8)
    assert parse_tail(b"", cut=False) is None
    assert parse_tail(b'{"not": "a marker"}\n', cut=False) is None


def test_only_a_large_files_tail_is_read(tmp_path: Path) -> None:
    path = tmp_path / "rank-00003.jsonl"
    early = [marker("step_end", n) for n in range(20_000)]  # some 5 MB
    path.write_bytes(lines(*early, marker("phase_begin", 20_000, name="forward")))
    tail = read_tail(path, max_bytes=4096)
    assert tail is not None and (tail.last.step, tail.phase) == (20_000, "forward")
    assert read_tail(tmp_path / "absent.jsonl") is None


def test_a_nodes_ranks_by_its_name_else_by_this_host() -> None:
    def tail(rank: int, node: str, hostname: str) -> MarkerTail:
        fields = marker("step_end", rank=rank, node=node, hostname=hostname)
        return MarkerTail(Marker.from_json(fields), None)

    tails = [tail(2, "n1", "h1"), tail(0, "n1", "h1"), tail(1, "n2", "h2")]
    assert [t.last.rank for t in ranks_on(tails, "n1", "h2")] == [0, 2]
    # No marker names the node (Ray's name for it is not the inventory's): this host's.
    assert [t.last.rank for t in ranks_on(tails, "n9", "h2")] == [1]
    assert ranks_on(tails, "n9", "h9") == []


def test_the_real_hostname_finds_a_rank_whose_node_is_named_otherwise(ranks: Ranks) -> None:
    ranks.start(4, node="inventory-name")
    (seen,) = node_evidence(str(ranks.run_dir), socket.gethostname()).ranks
    assert (seen.rank, seen.node) == (4, socket.gethostname())
    assert os.path.exists(f"/proc/{seen.pid}")
