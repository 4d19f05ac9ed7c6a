"""The progress display: bounded plain lines, a live block on a terminal, --verbose lines."""

from __future__ import annotations

import io
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from toolkit.cli.output.progress import SMALL_CLUSTER, ProgressReporter

NAMES = [f"n{i:04d}" for i in range(1, 1025)]
START_FAILS = {"n0008", "n0108", "n0517"}


class Clock:
    """Seconds that the test moves on by hand."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def bring_up(reporter: ProgressReporter, clock: Clock, step_s: float) -> None:
    """The events of ``rtk up`` on NAMES, ``step_s`` apart, as lifecycle/start.py sends them."""
    for name in NAMES:
        clock.now_s += step_s
        reporter.node(name, "probing")
        reporter.phase(name, "probed")
        reporter.node(name, "network profile tcp: no RDMA device")
    for name in NAMES:
        clock.now_s += step_s
        reporter.node(name, "starting Ray (worker)")
        if name in START_FAILS:
            reporter.node(name, "ray start failed (exit 1)")
            reporter.phase(name, "failed", f"{name}: ray start exited 1 (log on {name})")
        else:
            reporter.node(name, "Ray started in 5.0 s")
            reporter.phase(name, "started")
    reporter.info(f"waiting for {len(NAMES) - len(START_FAILS)} node(s) to join")
    for name in NAMES:
        clock.now_s += step_s
        if name not in START_FAILS:
            reporter.phase(name, "joined")
    reporter.info(f"{len(NAMES) - len(START_FAILS)} of {len(NAMES)} node(s) alive")


@pytest.mark.parametrize("step_s", [0.001, 0.05, 0.2])
def test_plain_lines_for_1024_nodes_stay_within_40(step_s: float) -> None:
    """From a bring-up in 3 s to one in 10 minutes: counts, not a line per node."""
    out, clock = io.StringIO(), Clock()
    with ProgressReporter(len(NAMES), stream=out, live=False, clock=clock) as reporter:
        bring_up(reporter, clock, step_s)
    lines = out.getvalue().splitlines()
    assert len(lines) <= 40, "\n".join(lines)
    assert not any("probing" in line or "n0001" in line for line in lines)
    counts = [line for line in lines if "probed" in line]
    # Each quarter of each phase is announced, and the last count line is the end.
    for phase, done in (("probed", 1024), ("started", 1021), ("joined", 1021)):
        for quarter in (256, 512, 768):
            assert any(re.search(rf"\b{phase} {quarter}/1024\b", line) for line in counts)
        assert f"{phase} {done}/1024" in counts[-1]
    assert counts[-1].endswith("failed 3")
    assert lines[-2:] == [
        "failed: 3 node(s), 1 cause(s)",
        "      3 node(s) n[0008,0108,0517]: ray start exited 1 (log on <node>)",
    ]
    assert "waiting for 1021 node(s) to join" in out.getvalue()


def test_plain_count_lines_come_after_a_pause_when_no_quarter_is_crossed() -> None:
    out, clock = io.StringIO(), Clock()
    with ProgressReporter(len(NAMES), stream=out, live=False, clock=clock) as reporter:
        for name in NAMES[:200]:  # under a quarter, over 40 s
            clock.now_s += 0.2
            reporter.phase(name, "probed")
    lines = out.getvalue().splitlines()
    assert 4 <= len(lines) <= 9, lines  # every 5 s at first, then rarer
    assert lines[-1].endswith("probed 200/1024")


def test_small_clusters_and_verbose_print_every_node_line() -> None:
    out, clock = io.StringIO(), Clock()
    with ProgressReporter(SMALL_CLUSTER, stream=out, live=False, clock=clock) as reporter:
        for name in NAMES[:SMALL_CLUSTER]:
            reporter.node(name, "probing")
            reporter.phase(name, "probed")
        reporter.phase("n0002", "failed", "n0002: port(s) 6379 already in use")
    lines = out.getvalue().splitlines()
    assert [line.split()[-2:] for line in lines[:SMALL_CLUSTER]] == [
        [n, "probing"] for n in NAMES[:SMALL_CLUSTER]
    ]
    assert lines[SMALL_CLUSTER:] == [
        "failed: 1 node(s), 1 cause(s)",
        "      1 node(s) n0002: port(s) 6379 already in use",
    ]

    out = io.StringIO()
    with ProgressReporter(len(NAMES), verbose=True, stream=out, live=True, clock=clock) as reporter:
        bring_up(reporter, clock, 0.01)
    text = out.getvalue()
    assert "\x1b[" not in text  # --verbose draws no live block, even on a terminal
    lines = text.splitlines()
    assert sum(line.endswith(" probing") for line in lines) == 1024
    assert sum("Ray started in 5.0 s" in line for line in lines) == 1021
    assert re.fullmatch(r"\[\s*\d+\.\ds\] n0001\s+probing", lines[0])


def screen(text: str) -> list[str]:
    """What a terminal shows after ``text``: the cursor moves the block uses, applied."""
    rows: list[str] = [""]
    row = 0
    for token in re.findall(r"\x1b\[\d*[A-Za-z]|\n|[^\x1b\n]+", text):
        if token == "\n":
            row += 1
            if row == len(rows):
                rows.append("")
        elif token.endswith("F"):
            row = max(0, row - int(token[2:-1]))
            rows[row] = rows[row]  # the cursor goes to the start of that line
        elif token == "\x1b[2K":
            rows[row] = ""
        elif token == "\x1b[J":
            del rows[row + 1 :]
            rows[row] = ""
        elif token.startswith("\x1b"):
            raise AssertionError(f"unexpected escape {token!r}")
        else:
            rows[row] += token
    return rows[:-1] if rows[-1] == "" else rows


def test_live_block_draws_counts_in_place_and_closes_on_ctrl_c() -> None:
    out, clock = io.StringIO(), Clock()
    reporter = ProgressReporter(len(NAMES), stream=out, live=True, clock=clock)
    with pytest.raises(KeyboardInterrupt), reporter:
        for name in NAMES[:300]:
            clock.now_s += 0.01
            reporter.phase(name, "probed")
        # Events closer than a refresh apart are drawn by the ticker, a moment later.
        wanted = ["  probed    300/1024 #######-----------------", "  3.0 s"]
        for _ in range(100):
            if screen(out.getvalue()) == wanted:
                break
            threading.Event().wait(0.02)
        assert screen(out.getvalue()) == wanted
        reporter.info("not ready yet: the head is starting")
        reporter.phase("n0009", "failed", "n0009: ray start exited 1")
        reporter.node("n0010", "a detail, not shown on a big cluster")
        raise KeyboardInterrupt
    assert reporter._ticker is not None and not reporter._ticker.is_alive()
    text = out.getvalue()
    assert "a detail" not in text
    # The block was redrawn in place many times, never scrolled: the screen holds
    # the message above the last block, then the failures by cause.
    assert text.count("  probed ") > 10
    assert screen(text) == [
        "[   3.0s] cluster        not ready yet: the head is starting",
        "  probed    300/1024 #######-----------------",
        "  failed      1",
        "  3.0 s",
        "failed: 1 node(s), 1 cause(s)",
        "      1 node(s) n0009: ray start exited 1",
    ]


def test_live_block_redraws_by_itself_and_uses_block_characters_on_utf8() -> None:
    """The ticker redraws the block with no event coming: the elapsed time moves on.

    The clock is the test's, moved on once the block is on screen; the ticker's
    redraw shows the new time (waited for: it comes every ``REFRESH_S`` on an idle
    machine, later on a busy one).
    """

    class Utf8(io.StringIO):
        encoding = "utf-8"

    out, clock = Utf8(), Clock()
    with ProgressReporter(4 * SMALL_CLUSTER, stream=out, live=True, clock=clock) as reporter:
        reporter.phase("n0001", "probed")
        bar = "  probed    1/32 █" + "░" * 23
        assert screen(out.getvalue()) == [bar, "  0.0 s"]  # drawn by the event itself
        clock.now_s += 0.3
        give_up = time.monotonic() + 60
        while screen(out.getvalue())[-1] != "  0.3 s":
            assert time.monotonic() < give_up, "the ticker never redrew the block"
            time.sleep(0.01)
        assert reporter._ticker is not None and reporter._ticker.is_alive()
    assert out.getvalue().count("\x1b[2K  probed") >= 3  # the event's, the ticker's, the end's
    assert screen(out.getvalue()) == [bar, "  0.3 s"]


def test_events_from_many_threads_are_each_counted_once() -> None:
    out = io.StringIO()
    reporter = ProgressReporter(len(NAMES), stream=out, live=False)
    with reporter, ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(lambda n: reporter.phase(n, "probed"), NAMES))
    assert reporter.summary() == "no node reported yet"  # closed: counted from zero again
    assert out.getvalue().splitlines()[-1].endswith("probed 1024/1024")


def test_a_second_bring_up_counts_from_zero() -> None:
    """rtk profile brings clusters up and down in turn through one reporter."""
    out, clock = io.StringIO(), Clock()
    with ProgressReporter(64, stream=out, live=False, clock=clock) as reporter:
        for round_nodes in (NAMES[:64], NAMES[:16]):
            for name in round_nodes:
                reporter.phase(name, "probed")
                reporter.phase(name, "joined")
            for name in round_nodes:
                reporter.phase(name, "stopped")
    counts = [line.split("] cluster")[1].strip() for line in out.getvalue().splitlines()]
    assert counts[-1] == "probed 16/64, joined 16/64, stopped 16/64"
    assert "probed 64/64, joined 64/64, stopped 64/64" in counts
    assert all("80" not in line for line in counts)
