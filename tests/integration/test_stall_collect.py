"""A stall's evidence over a real local Ray: the node's ranks, and nodes that never answer.

A one-node Ray runs on this machine; real rank processes (``tests/rank_processes.py``)
write markers as inventory node ``here`` and wait at a known line (one of them
SIGSTOPped). The driver asks ``here`` (its real Ray node id), a node id Ray has never
seen, and a node whose task hangs: the first answers with its ranks' stacks, the other
two are named with their errors within the per-node time, never waited for longer. The
watchdog, on the same Ray, starts its warm takers once a stall nears and takes the
evidence through them.
``rtk stall-check``'s job, run against the same Ray (its node marked ``here`` as rtk
marks the nodes it brings up), names the stopped rank.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from rank_processes import WAIT_FUNCTION, WAIT_LINE, Ranks

from toolkit.ray_resources import HOST_RESOURCE_PREFIX
from toolkit.rundir import RunDir
from toolkit.stall.collect import EvidenceTakers
from toolkit.stall.records import SLEEPING, STOPPED, Frame, StallRecord, read_stalls
from toolkit.stall.settings import CHECK_PREFIX, CHECK_RECORD_PREFIX, CheckOptions, WatchSettings

pytestmark = pytest.mark.ray

GHOST_ID = "0123456789abcdef" * 3 + "01234567"  # 56 hex digits: a node id no Ray has
# Each node's time to answer. A node that answers is waited for as long as it takes a
# worker to start and py-spy to read three stacks on a machine whose cores are busy;
# the ghost and the hung node are given up on after it, so it is short, not tight.
TIMEOUT_S = 10.0
COLLECT_DEADLINE_S = 120.0
T = TypeVar("T")


@pytest.fixture(scope="module")
def node_id(ray_available: None) -> Iterator[str]:
    import ray

    ray.init(
        address="local",  # its own, whatever /tmp/ray points at
        num_cpus=1,
        resources={f"{HOST_RESOURCE_PREFIX}here": 1},  # as rtk up marks its nodes
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )
    try:
        yield ray.get_runtime_context().get_node_id()
    finally:
        ray.shutdown()


def within_deadline(collect: Callable[[], T]) -> T:
    """``collect()``'s answer, which must come while a node still holds its own back.

    The node that never answers (a ghost, a hung task) answers at most when the test
    lets it, after: the collection gives up on it at ``TIMEOUT_S``. The deadline is for
    a collection that waits for it anyway, far past the timeout on any machine.
    """
    answer: list[T] = []
    worker = threading.Thread(target=lambda: answer.append(collect()), daemon=True)
    worker.start()
    worker.join(COLLECT_DEADLINE_S)
    assert not worker.is_alive(), "the collection waited for the node that does not answer"
    (found,) = answer
    return found


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[Ranks]:
    started = Ranks(tmp_path / "run", tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


@pytest.fixture
def takers(node_id: str) -> Iterator[EvidenceTakers]:
    """A warm taker on the node (asked at once: its start counts in its time)."""
    started = EvidenceTakers()
    assert started.warm([node_id]) == 1 and started.warm([node_id]) == 0  # one per node
    try:
        yield started
    finally:
        started.close()


def test_the_nodes_ranks_answer_and_a_node_ray_never_had_is_named(
    node_id: str, ranks: Ranks, takers: EvidenceTakers
) -> None:
    from toolkit.stall.collect import collect_evidence

    pids = [ranks.start(rank, node="here") for rank in range(3)]
    ranks.stop(pids[2])
    here, ghost = within_deadline(
        lambda: collect_evidence(
            {"here": node_id, "ghost": GHOST_ID},
            str(ranks.run_dir),
            per_node_timeout_s=TIMEOUT_S,
            takers=takers,  # the ghost has none: it is asked through a task
        )
    )
    assert here.node == "here" and here.error is None, here
    assert [(r.rank, r.pid) for r in here.ranks] == list(enumerate(pids))
    where = Frame(WAIT_FUNCTION, str(ranks.script), WAIT_LINE)
    assert [(r.state, r.frames[0]) for r in here.ranks] == [
        (SLEEPING, where),
        (SLEEPING, where),
        (STOPPED, where),
    ]
    assert ghost.node == "ghost" and ghost.ranks == () and ghost.error is not None
    assert "\n" not in ghost.error


def test_a_node_whose_task_hangs_is_named_at_its_time(
    node_id: str, ranks: Ranks, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import ray

    from toolkit.stall import collect
    from toolkit.stall.node_evidence import node_evidence

    release = tmp_path / "release"  # the slow node's task answers only once this exists

    @ray.remote(num_cpus=0)
    def hang_on_slow(
        run_dir: str, node: str, stack_timeout_s: float, request: str, ras: bool
    ) -> object:
        while node == "slow" and not release.exists():
            time.sleep(0.1)
        return node_evidence(run_dir, node, stack_timeout_s, flight_request=request, ras=ras)

    monkeypatch.setattr(collect, "_node_evidence", hang_on_slow)
    ranks.start(0, node="here")
    try:
        found = within_deadline(
            lambda: collect.collect_evidence(
                {"slow": node_id, "here": node_id},
                str(ranks.run_dir),
                per_node_timeout_s=TIMEOUT_S,
            )
        )
    finally:
        release.touch()
    assert [(n.node, n.error) for n in found] == [
        ("slow", f"did not answer within {TIMEOUT_S:g} s"),
        ("here", None),
    ]
    assert [r.rank for r in found[1].ranks] == [0]
    assert found[0].elapsed_s >= TIMEOUT_S  # given its whole time, then named


def test_the_watchdog_warms_its_takers_as_a_stall_nears_and_asks_them(
    node_id: str, ranks: Ranks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 stopped after its step 0: past half the timeout the watchdog starts a
    taker on the node; at the stall the evidence comes through it (a task would fail)."""
    import ray

    from toolkit.stall import collect
    from toolkit.stall.watchdog import Watchdog

    @ray.remote(num_cpus=0)
    def no_task(*_: object) -> None:
        raise RuntimeError("asked through a task")

    monkeypatch.setattr(collect, "_node_evidence", no_task)
    pids = [ranks.start(rank, node="here") for rank in range(2)]
    ranks.stop(pids[1])
    now_s = [time.time()]
    said: list[str] = []
    watchdog = Watchdog(
        str(ranks.run_dir),
        WatchSettings(
            timeout_s=60.0, startup_timeout_s=60.0, per_node_timeout_s=COLLECT_DEADLINE_S / 2
        ),
        said.append,
        clock=lambda: now_s[0],
    )
    assert watchdog.takers is not None
    try:
        assert watchdog.tick() is None and watchdog.takers.node_ids == ()
        now_s[0] += 31.0  # past half the timeout after step 0
        assert watchdog.tick() is None and watchdog.takers.node_ids == (node_id,)
        now_s[0] += 30.0
        record = within_deadline(watchdog.tick)
        assert record is not None and record.step == 0, said
        (here,) = record.nodes
        assert (here.node, here.error, [r.pid for r in here.ranks]) == ("here", None, pids)
        assert [(s.rank, s.node) for s in record.suspects] == [(1, "here")]
    finally:
        watchdog.stop()
    assert watchdog.takers.node_ids == ()  # stopped with the watchdog


def test_the_check_job_names_the_stopped_rank(
    node_id: str, ranks: Ranks, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolkit.stall import check_job

    pids = [ranks.start(rank, node="here") for rank in range(3)]
    ranks.stop(pids[1])
    options = CheckOptions(str(ranks.run_dir), TIMEOUT_S, as_json=True)
    assert check_job.main([json.dumps(options.to_json())]) == 0  # on the Ray already joined
    out = capsys.readouterr().out.splitlines()
    said = [line.removeprefix(CHECK_PREFIX) for line in out if line.startswith(CHECK_PREFIX)]
    assert said[0].startswith("step 0 finished "), said
    assert said[1].startswith("stalled at step 0 for "), said
    assert ": rank 1 (here) is stopped (SIGSTOP or a debugger)" in said[1], said
    assert "  rank 1 (here) is stopped (SIGSTOP or a debugger)" in said
    (kept,) = read_stalls(RunDir(ranks.run_dir).stall)
    assert (kept.action, kept.timeout_s, kept.step) == ("check", 0.0, 0)
    assert [(s.rank, s.node) for s in kept.suspects] == [(1, "here")]
    (here,) = kept.nodes
    assert (here.node, here.error, [r.pid for r in here.ranks]) == ("here", None, pids)
    where = Frame(WAIT_FUNCTION, str(ranks.script), WAIT_LINE)
    assert [(r.state, r.frames[0]) for r in here.ranks] == [
        (SLEEPING, where),
        (STOPPED, where),
        (SLEEPING, where),
    ]
    (record,) = [line for line in out if line.startswith(CHECK_RECORD_PREFIX)]
    assert StallRecord.from_json(json.loads(record.removeprefix(CHECK_RECORD_PREFIX))) == kept


# --- Slow, not stuck: SlowWatch over the same local Ray ----------------------------


def test_the_slow_watch_names_the_rank_the_other_waits_for(
    node_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ranks' barrier records on node ``here``: rank 1 is last at every step."""
    from toolkit.rundir.markers import MarkerWriter
    from toolkit.stall.slow import NodeSteps, SlowWatch, ask_every_node

    monkeypatch.setenv("RTK_NODE", "here")
    run_dir = tmp_path / "run"
    writers = [MarkerWriter(run_dir, rank, rank, 2) for rank in (0, 1)]
    for step in range(40):
        for rank, writer in enumerate(writers):
            writer.write("step_begin", step)
            writer.write("barrier", step, wait_s=0.0 if rank == 1 else 0.7, group=None)
            writer.write("step_end", step)
    for writer in writers:
        writer.close()

    def ask() -> list[NodeSteps]:
        return ask_every_node(str(run_dir), {"here": node_id}, per_node_timeout_s=30.0)

    watch = SlowWatch(str(run_dir), interval_s=10.0, ask=ask)
    assert watch.tick(0.0) is None
    line = watch.tick(10.0)
    assert line == (
        "slow, not stuck: rank 1 (here) was last at 40 of the last 40 steps; the others "
        "waited 0.70 s a step for it (median; from barriers)"
    ), line
    assert watch.answered == 1
    assert watch.tick(20.0) is None  # the same culprit, said once
