"""A rank's stack: py-spy and faulthandler on real processes, and their parsers on recorded text.

The ranks are real Python children (``tests/rank_processes.py``) that write markers
through ``toolkit.markers`` and wait in ``wait_here`` at ``WAIT_LINE``; the recorded
outputs are in ``tests/data/stacks`` (see its README).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import REPO
from rank_processes import WAIT_FUNCTION, WAIT_LINE, Ranks

from toolkit.rundir import RunDir
from toolkit.rundir.markers import registration
from toolkit.stall.records import Frame
from toolkit.stall.stacks import (
    FAULTHANDLER,
    NO_STACK,
    PY_SPY,
    faulthandler_stack,
    parse_faulthandler,
    parse_py_spy_json,
    py_spy_binary,
    py_spy_error,
    py_spy_stack,
    rank_stack,
)

DATA = REPO / "tests" / "data" / "stacks"
TRAIN_THREAD = 140267839534784  # the recorded process's "train" thread
RECORDED_PID = 10159
STDLIB = "/usr/lib/python3.11/threading.py"
TRAIN_STACK = (
    Frame("train_loop", "/home/ml/train.py", 14),
    Frame("Thread.run", STDLIB, 982),
    Frame("Thread._bootstrap_inner", STDLIB, 1045),
    Frame("Thread._bootstrap", STDLIB, 1002),
)
MAIN_STACK = (
    Frame("Thread._wait_for_tstate_lock", STDLIB, 1139),
    Frame("Thread.join", STDLIB, 1119),
    Frame("main", "/home/ml/train.py", 23),
    Frame("<module>", "/home/ml/train.py", 26),
)


def waiting_at_the_known_line(frames: tuple[Frame, ...], script: Path) -> None:
    assert frames[0] == Frame(WAIT_FUNCTION, str(script), WAIT_LINE), frames
    assert frames[-1].function == "<module>"


# --- the parsers, on recorded output ---------------------------------------------------


def test_py_spy_json_keeps_the_marker_thread_else_the_main_thread() -> None:
    text = (DATA / "py-spy-0.4.3-three-threads.json").read_text()
    assert parse_py_spy_json(text, RECORDED_PID, TRAIN_THREAD) == TRAIN_STACK
    assert parse_py_spy_json(text, RECORDED_PID) == MAIN_STACK
    assert parse_py_spy_json(text, RECORDED_PID, thread_id=1) == MAIN_STACK  # a thread gone


def test_py_spy_json_without_thread_names_keeps_the_pids_own_thread() -> None:
    text = (DATA / "py-spy-0.4.3-three-threads.json").read_text()
    unnamed = text.replace('"MainThread"', "null").replace('"train"', "null")
    assert parse_py_spy_json(unnamed, RECORDED_PID) == MAIN_STACK
    assert parse_py_spy_json(unnamed, pid=1)[0].function == "train_loop"  # else the first
    assert parse_py_spy_json("[]", RECORDED_PID) == ()
    with pytest.raises(ValueError, match="not JSON"):
        parse_py_spy_json("Error: permission denied", RECORDED_PID)
    with pytest.raises(ValueError, match="list of threads"):
        parse_py_spy_json('{"pid": 1}', RECORDED_PID)


def test_py_spy_error_is_one_line_without_the_backtrace() -> None:
    stderr = (DATA / "py-spy-0.4.3-no-such-pid.stderr").read_text()
    assert py_spy_error(stderr) == (
        "Error: Failed to get process executable name. Check that the process is running.; "
        "0: No such file or directory (os error 2); 1: No such file or directory (os error 2)"
    )
    assert py_spy_error("") == "failed, saying nothing"


def test_faulthandler_dump_keeps_the_marker_thread_else_the_main_thread() -> None:
    text = (DATA / "faulthandler-3.11-three-threads.txt").read_text()
    train_stack = tuple(
        Frame(f.function.removeprefix("Thread."), f.file, f.line) for f in TRAIN_STACK
    )
    main_stack = tuple(
        Frame(f.function.removeprefix("Thread."), f.file, f.line) for f in MAIN_STACK
    )
    assert parse_faulthandler(text, TRAIN_THREAD) == train_stack
    assert parse_faulthandler(text) == main_stack  # its outermost frame is <module>
    # Without a <module> thread: the current one (it ran the handler).
    no_module = text.replace(" in <module>", " in run_script")
    outermost = replace(main_stack[-1], function="run_script")
    assert parse_faulthandler(no_module) == (*main_stack[:-1], outermost)


def test_faulthandler_dump_of_one_thread_and_of_repeated_dumps() -> None:
    one = (
        "Stack (most recent call first):\n"
        '  File "/home/ml/train.py", line 9 in step\n'
        '  File "<frozen runpy>", line ??? in _run_module_as_main\n'
    )
    assert parse_faulthandler(one) == (
        Frame("step", "/home/ml/train.py", 9),
        Frame("_run_module_as_main", "<frozen runpy>", 0),
    )
    twice = (
        "# rtk stack dumps: pid=7 thread=1\n"
        "Current thread 0x0000000000000001 (most recent call first):\n"
        '  File "a.py", line 1 in first\n'
        "\nCurrent thread 0x0000000000000001 (most recent call first):\n"
        '  File "a.py", line 2 in second\n'
        "  <no Python frame>\n"
    )
    assert parse_faulthandler(twice, thread_id=1) == (Frame("second", "a.py", 2),)
    assert parse_faulthandler("nothing here\n") == ()


# --- real processes ------------------------------------------------------------------


def test_py_spy_is_found_beside_this_python() -> None:
    found = py_spy_binary()
    assert found is not None and Path(found).parent == Path(sys.executable).parent


def test_py_spy_reads_a_waiting_rank_and_a_stopped_one(ranks: Ranks) -> None:
    waiting, stopped = ranks.start(0), ranks.start(1)
    ranks.stop(stopped)
    for pid in (waiting, stopped):
        read = py_spy_stack(pid, timeout_s=30.0)
        assert read.source == PY_SPY and read.error is None, read
        waiting_at_the_known_line(read.frames, ranks.script)
    # A stopped rank is read without waiting for it: never by its own handler.
    read = rank_stack(stopped, RunDir(ranks.run_dir).stack_dump(1), 30.0, py_spy=False)
    assert read.source == NO_STACK and "not asked, the process is stopped" in (read.error or "")


def test_py_spy_on_an_ended_rank_says_why(ranks: Ranks) -> None:
    ended = ranks.start(0, exit_after=True)
    read = py_spy_stack(ended, timeout_s=30.0)
    assert read.source == PY_SPY and read.frames == ()
    assert read.error is not None and read.error.startswith("py-spy: Error:"), read.error


def test_faulthandler_reads_a_waiting_rank_from_its_dump_file(ranks: Ranks) -> None:
    pid = ranks.start(3)
    dump = RunDir(ranks.run_dir).stack_dump(3)
    registered = registration(dump, pid)
    assert registered is not None and registered.pid == pid
    for _ in range(2):  # a second dump is read from where the first ended
        read = faulthandler_stack(pid, dump, timeout_s=30.0)
        assert read.source == FAULTHANDLER and read.error is None, read
        waiting_at_the_known_line(read.frames, ranks.script)
    assert dump.read_text().count("Current thread") == 2
    via_rank_stack = rank_stack(pid, dump, 30.0, py_spy=False)
    waiting_at_the_known_line(via_rank_stack.frames, ranks.script)


def test_a_process_that_registered_nothing_is_never_sent_the_signal(tmp_path: Path) -> None:
    # A Python that writes no markers has no handler: the signal would kill it.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        dump = tmp_path / "stacks" / "rank-0.txt"
        read = faulthandler_stack(child.pid, dump, timeout_s=5.0)
        assert read.error == f"pid {child.pid} registered no stack dumps in {dump}"
        # A registration line of its pid is not enough: it must catch the signal.
        dump.parent.mkdir()
        dump.write_text(f"# rtk stack dumps: pid={child.pid} thread=1 signal=12\n")
        read = faulthandler_stack(child.pid, dump, timeout_s=5.0)
        assert read.error == f"pid {child.pid} no longer catches SIGUSR2"
        assert child.poll() is None  # alive: nothing was sent
    finally:
        child.kill()
        child.wait()


def test_without_py_spy_or_a_handler_both_errors_are_named(
    ranks: Ranks, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = ranks.start(0)
    monkeypatch.setattr("toolkit.stall.stacks.py_spy_binary", lambda: None)
    read = rank_stack(pid, ranks.run_dir / "elsewhere.txt", 5.0)
    assert read.source == NO_STACK and read.frames == ()
    assert read.error == (
        "py-spy not found (beside python, nor on PATH); "
        f"faulthandler: pid {pid} registered no stack dumps in {ranks.run_dir / 'elsewhere.txt'}"
    )
    # With its own dump file, faulthandler answers in py-spy's place.
    read = rank_stack(pid, RunDir(ranks.run_dir).stack_dump(0), 30.0)
    assert read.source == FAULTHANDLER
    waiting_at_the_known_line(read.frames, ranks.script)
    assert os.path.exists(f"/proc/{pid}")  # the signal did not end it
