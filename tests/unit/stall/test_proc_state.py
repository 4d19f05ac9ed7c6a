"""A rank's process state from /proc: the parser on real and awkward lines, real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rank_processes import wait_for_state

from toolkit.stall.proc_state import STATE_OF_LETTER, parse_stat, process_state, read_stat
from toolkit.stall.records import GONE, PROCESS_STATES, RUNNING, SLEEPING, STOPPED, ZOMBIE

# A kernel thread's line, as /proc/2/stat reads (52 fields).
KTHREADD = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 3 0 0 " + " ".join(
    ["0"] * 30
)


def test_the_stat_line_is_parsed_whatever_the_command_name() -> None:
    own = parse_stat(Path("/proc/self/stat").read_text())
    assert own.pid > 0 and own.state == "R"
    kthreadd = parse_stat(KTHREADD)
    assert (kthreadd.pid, kthreadd.command, kthreadd.state, kthreadd.start_ticks) == (
        2,
        "kthreadd",
        "S",
        3,
    )
    odd = parse_stat(KTHREADD.replace("(kthreadd)", "(a) T (b)"))  # comm may hold both
    assert (odd.command, odd.state) == ("a) T (b", "S")
    with pytest.raises(ValueError, match="not a /proc/PID/stat line"):
        parse_stat("2 kthreadd S 0")


def test_every_letter_maps_to_a_known_state() -> None:
    assert set(STATE_OF_LETTER.values()) <= set(PROCESS_STATES)


def test_real_processes_running_sleeping_stopped_zombie_and_gone() -> None:
    assert process_state(os.getpid()) == RUNNING
    script = "import time; print('ready', flush=True); time.sleep(600)"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        wait_for_state(child.pid, "S")
        assert process_state(child.pid) == SLEEPING
        child.send_signal(signal.SIGSTOP)
        wait_for_state(child.pid, "T")
        assert process_state(child.pid) == STOPPED
        child.kill()
        wait_for_state(child.pid, "Z")  # not reaped yet
        assert process_state(child.pid) == ZOMBIE
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert process_state(child.pid) == GONE
    assert read_stat(child.pid) is None


def test_a_process_that_began_after_the_last_marker_is_another_program() -> None:
    assert process_state(os.getpid(), marked_mono_s=time.monotonic()) == RUNNING
    assert process_state(os.getpid(), marked_mono_s=time.monotonic() - 3600.0) == GONE
