"""One node's torchrun process: its environment, its output, its end (real processes)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from toolkit.torchrun.node_runner import TorchrunNode, child_env, descendants, port_taken

REPO = Path(__file__).resolve().parents[3]


def test_the_ranks_see_rtk_and_the_user_env_and_the_nodes_gpus() -> None:
    base = {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": "/x", "A": "node"}
    env = child_env(base, {"RTK_RUN_DIR": "/runs/r1"}, {"A": "user"})
    assert "CUDA_VISIBLE_DEVICES" not in env  # Ray's empty value for a GPU-less actor
    assert env["PYTHONPATH"].split(os.pathsep) == [str(REPO), "/x"]
    assert env["RTK_RUN_DIR"] == "/runs/r1" and env["A"] == "user"
    assert child_env({"CUDA_VISIBLE_DEVICES": "0,1"}, {}, {})["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_a_listening_port_is_taken_and_a_free_one_is_not() -> None:
    with socket.socket() as server:
        server.bind(("", 0))
        server.listen()
        port = server.getsockname()[1]
        assert port_taken(port)
    assert not port_taken(port)


def test_the_childs_output_is_copied_and_its_status_returned(
    capfd: pytest.CaptureFixture[str],
) -> None:
    node = TorchrunNode()
    node.start(["-c", "print('hello from rank'); raise SystemExit(4)"], {}, {})
    assert node.wait() == 4
    assert "hello from rank" in capfd.readouterr().out


def test_the_first_failed_rank_is_read_from_the_childs_output() -> None:
    """A child that prints torchrun's failure summary, as torchrun does when a rank dies."""
    summary = (REPO / "tests" / "data" / "torchrun_failures" / "sigkill.txt").read_text()
    node = TorchrunNode()
    assert node.failure() is None
    node.start(["-c", f"import sys; sys.stdout.write({summary!r}); raise SystemExit(1)"], {}, {})
    assert node.wait() == 1
    assert node.failure() == "rank 1 (local_rank 0) failed first: killed by SIGKILL"


def test_stop_ends_the_child_and_what_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    script = (
        "import subprocess, sys, time, pathlib\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(child.pid))\n"
        "time.sleep(300)\n"
    )
    node = TorchrunNode()
    node.start(["-c", script], {}, {})
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    assert node.stop(grace_s=5.0) is not None
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_stop_ends_a_stopped_rank_in_a_session_of_its_own(tmp_path: Path) -> None:
    """As torchrun starts its ranks: a new session each; this one SIGSTOPped itself."""
    pid_file = tmp_path / "rank"
    rank = "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)"
    script = (
        "import subprocess, sys, time, pathlib\n"
        f"child = subprocess.Popen([sys.executable, '-c', {rank!r}], start_new_session=True)\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(child.pid))\n"
        "time.sleep(300)\n"
    )
    node = TorchrunNode()
    node.start(["-c", script], {}, {})
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    stopped = int(pid_file.read_text())
    while _state(stopped) != "T" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _state(stopped) == "T"
    assert node.stop(grace_s=1.0) is not None
    deadline = time.monotonic() + 10
    while _alive(stopped) and _state(stopped) != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(stopped) or _state(stopped) == "Z"


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rfind(")") + 2]


def test_descendants_follow_the_parent_links(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, ppid in ((10, 1), (11, 10), (12, 11), (13, 10), (20, 1)):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(f"{pid} (a (b) c) S {ppid} 0 0\n")
    (proc / "self").mkdir()
    assert sorted(descendants(10, str(proc))) == [11, 12, 13]
    assert descendants(12, str(proc)) == []


def test_stop_before_start_is_harmless() -> None:
    assert TorchrunNode().stop() is None
    assert TorchrunNode().wait() == 0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
