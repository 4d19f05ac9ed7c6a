"""The per-process recorder: nothing until the first write, then run_start with
steps_from, step numbering, the deferred step_begin, run_end, threads, a fork, a
run directory it cannot write."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from marker_ranks import events, python_env

from toolkit.markers import recorder
from toolkit.markers.identity import Identity
from toolkit.markers.recorder import Recorder
from toolkit.rundir import Marker, RunDir, read_markers


def rank(n: int) -> Identity:
    return Identity(n, n % 2, 4, None, "env")


def written(run_dir: Path) -> list[Marker]:
    return read_markers(run_dir)


def test_nothing_exists_until_the_first_write(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    rec = Recorder(str(run_dir), lambda: rank(3))
    assert rec.writing and not rec.started and rec.current_step is None
    assert not run_dir.exists()
    rec.write("hello", {"n": 1})
    assert [m.event for m in written(run_dir)] == ["run_start", "hello"]
    assert RunDir(run_dir).marker(3).is_file()
    first = written(run_dir)[0]
    assert (first.step, first.fields, first.rank, first.local_rank, first.world_size) == (
        None,
        {"steps_from": "api"},
        3,
        1,
        4,
    )


def test_steps_from_is_kept_until_the_first_marker_and_checked(tmp_path: Path) -> None:
    rec = Recorder(str(tmp_path), lambda: rank(0))
    assert rec.set_steps_from("hf")
    assert rec.set_steps_from("lightning")  # before the first marker the last one counts
    rec.begin_step()
    assert not rec.set_steps_from("auto")  # too late: ignored
    with pytest.raises(ValueError, match="expected one of api, auto, hf"):
        rec.set_steps_from("keras")
    assert written(tmp_path)[0].fields == {"steps_from": "lightning"}


def test_steps_count_on_from_the_last_and_events_carry_the_current_step(tmp_path: Path) -> None:
    rec = Recorder(str(tmp_path), lambda: rank(0))
    rec.write("setup", {})
    assert rec.begin_step() == 0
    rec.write("phase_begin", {"name": "forward"})
    assert rec.end_step(fields={"tokens": 8}) == 0
    assert rec.end_step() == 1  # none open: the next one (callers that only see ends)
    assert rec.begin_step(10) == 10
    rec.end_step()
    assert rec.begin_step() == 11
    rec.write("eval", {})
    assert events(written(tmp_path)) == [
        ("run_start", None),
        ("setup", None),
        ("step_begin", 0),
        ("phase_begin:forward", 0),
        ("step_end", 0),
        ("step_end", 1),
        ("step_begin", 10),
        ("step_end", 10),
        ("step_begin", 11),
        ("eval", 11),
    ]
    assert written(tmp_path)[4].fields == {"tokens": 8}


def test_a_deferred_step_begins_at_the_next_activity_or_never(tmp_path: Path) -> None:
    rec = Recorder(str(tmp_path), lambda: rank(0))
    rec.defer_step_begin()
    assert not rec.started  # deferring writes nothing
    rec.flush_pending()
    rec.end_step()
    rec.defer_step_begin()
    rec.write("phase_begin", {"name": "backward"})  # activity: step 1 begins first
    rec.end_step()
    rec.defer_step_begin()  # step 2 never sees activity
    rec.close()
    assert events(written(tmp_path)) == [
        ("run_start", None),
        ("step_begin", 0),
        ("step_end", 0),
        ("step_begin", 1),
        ("phase_begin:backward", 1),
        ("step_end", 1),
        ("run_end", 1),
    ]


def test_close_ends_the_run_once_and_drops_later_writes(tmp_path: Path) -> None:
    rec = Recorder(str(tmp_path), lambda: rank(0))
    rec.close()
    assert not (tmp_path / "markers").exists()  # no run_start, so no run_end either
    rec = Recorder(str(tmp_path / "b"), lambda: rank(0))
    rec.begin_step()
    rec.close()
    rec.close()
    rec.write("late", {})
    assert not rec.writing
    assert [m.event for m in written(tmp_path / "b")] == ["run_start", "step_begin", "run_end"]


def test_a_run_directory_it_cannot_write_turns_it_off_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    rec = Recorder(str(blocker), lambda: rank(0))
    with caplog.at_level(logging.WARNING, logger="toolkit.markers.recorder"):
        rec.begin_step()
        rec.end_step()
        rec.write("more", {})
    assert not rec.writing
    assert len(caplog.records) == 1 and "markers are off" in caplog.records[0].getMessage()


def test_threads_share_one_stream_whole_lines(tmp_path: Path) -> None:
    rec = Recorder(str(tmp_path), lambda: rank(0))

    def work(name: str) -> None:
        for i in range(200):
            rec.write("tick", {"thread": name, "i": i})

    threads = [threading.Thread(target=work, args=(f"t{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ticks = [m for m in written(tmp_path) if m.event == "tick"]
    assert len(ticks) == 800
    assert [m.event for m in written(tmp_path)].count("run_start") == 1
    for name in ("t0", "t3"):
        assert [m.fields["i"] for m in ticks if m.fields["thread"] == name] == list(range(200))


def test_reset_reads_the_environment_and_ends_the_previous_run(tmp_path: Path) -> None:
    try:
        on = recorder.reset({"RTK_RUN_DIR": str(tmp_path)})
        assert on is recorder.active and on is not None and on.run_dir == str(tmp_path)
        on.write("x", {})
        assert recorder.reset({"RTK_RUN_DIR": ""}) is None
        assert recorder.active is None
        assert written(tmp_path)[-1].event == "run_end"
    finally:
        recorder.reset({})


def test_run_end_at_exit_and_nothing_from_a_forked_child(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import os, sys
        from toolkit import markers
        markers.begin_step()
        pid = os.fork()
        if pid == 0:  # the child shares the rank's file: it must write nothing
            markers.mark("from_child")
            markers.end_step()
            sys.exit(0)  # a normal exit: atexit runs here too
        os.waitpid(pid, 0)
        markers.end_step(tokens=5)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=python_env(tmp_path, RANK="1", WORLD_SIZE="2"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    found = written(tmp_path)
    assert events(found) == [
        ("run_start", None),
        ("step_begin", 0),
        ("step_end", 0),
        ("run_end", 0),
    ]
    assert {m.pid for m in found} == {found[0].pid} and found[0].rank == 1


def test_a_run_directory_under_home_is_each_nodes_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    try:
        on = recorder.reset({"RTK_RUN_DIR": "~/rtk-runs/r1"})
        assert on is not None and on.run_dir == str(tmp_path / "rtk-runs" / "r1")
    finally:
        recorder.reset({})
