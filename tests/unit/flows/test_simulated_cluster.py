"""rtk's real flow on 64 simulated nodes: bring-up, exec, preflight and teardown.

Only the transport and Ray's view are simulated (``toolkit.simulation``); the
planner, the executor, the wait loop, preflight and teardown are rtk's own. Time runs
at 1/100: a 5 s ``ray start`` takes 50 ms, a 0.2 s handshake 2 ms.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from toolkit.cli import TRANSPORT_FACTORY, main
from toolkit.cluster.progress_reporter import QuietReporter
from toolkit.errors import ClusterError
from toolkit.flows import PreflightPolicy, Session
from toolkit.inventory import Inventory, load_inventory
from toolkit.simulation import (
    Faults,
    LatencyModel,
    SimulatedCluster,
    SimulatedTransport,
    pick_nodes,
)
from toolkit.state.store import StateStore

NODES = 64
NAMES = [f"n{i:04d}" for i in range(1, NODES + 1)]
SCALE = 0.01


class Lines(QuietReporter):
    """A reporter that keeps every progress line."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def node(self, name: str, message: str) -> None:
        self.lines.append(f"{name}: {message}")

    def info(self, message: str) -> None:
        self.lines.append(message)


def inventory(
    tmp_path: Path, min_nodes: int | None = None, wait_timeout_s: float = 20
) -> Inventory:
    data: dict[str, Any] = {
        "cluster": "sim",
        "nodes": [{"host": n, "address": f"10.0.0.{i + 1}"} for i, n in enumerate(NAMES)],
        "ray": {"wait_timeout_s": wait_timeout_s},
    }
    if min_nodes is not None:
        data["min_nodes"] = min_nodes
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_inventory(path)


def simulate(
    faults: Faults | None = None, scale: float = SCALE, record_order: bool = False
) -> SimulatedCluster:
    """A simulated cluster; sessions reach it through their transport factory."""
    return SimulatedCluster(LatencyModel(scale=scale), faults, record_order=record_order)


def session(
    inv: Inventory, tmp_path: Path, cluster: SimulatedCluster, reporter: Lines | None = None
) -> Session:
    """A session on ``cluster``: each one opens its own connections, as a command does."""
    store = StateStore(inv.name, root=tmp_path / "state")
    return Session(
        inv,
        reporter or Lines(),
        store=store,
        excluded=(),
        transport_factory=lambda _: SimulatedTransport(cluster),
    )


def test_64_nodes_come_up_are_checked_run_a_command_and_go_down(
    tmp_path: Path,
) -> None:
    cluster = simulate()
    inv = inventory(tmp_path)
    with session(inv, tmp_path, cluster) as s:
        brought = s.bring_up(PreflightPolicy.ENFORCE)
        up = brought.up
        assert sorted(up.started) == NAMES
        assert up.status is not None and sorted(up.status.ready) == NAMES
        assert cluster.running() == set(NAMES)
        # One connection per node for every step of the command, as over SSH.
        assert cluster.connections == NODES
        assert cluster.operations["ray start"] == NODES
        assert cluster.operations["probe"] == NODES
        env_file, token_file = s.plan.paths.env_file, s.plan.paths.token_file
        assert {(n, env_file) for n in NAMES} <= set(cluster.files)
        assert {(n, token_file) for n in NAMES} <= set(cluster.files)
        assert b"RTK_NODE=n0007\n" in cluster.files[("n0007", env_file)]
        # Preflight checked every node and every pair's Ray ports.
        report = brought.preflight.report
        assert report is not None and report.exit_code == 0
        reached = {c.scope for c in report.checks if c.name == "net.port.node_manager"}
        assert reached == set(NAMES)  # a check per node and port, each from every peer
        assert report.reach is not None and report.reach.pairs == NODES * (NODES - 1)
        # The checks ran once, beside the wait loop: Ray then said what they assumed.
        assert cluster.operations["facts"] == NODES
        runs = s.exec(["true"])
        assert [r.node for r in runs if r.ok] == NAMES
    # A new command opens new connections: the handshakes again.
    with session(inv, tmp_path, cluster) as s:
        down = s.tear_down()
    assert sorted(down.stopped) == NAMES and not down.failed
    assert cluster.connections == 2 * NODES
    assert cluster.running() == set()
    assert cluster.status_answer()[0] == 1


@pytest.mark.parametrize("min_nodes", [NODES - 3, None])
def test_failed_nodes_are_named_and_left_out_when_min_nodes_allows(
    tmp_path: Path, min_nodes: int | None
) -> None:
    start_fails = pick_nodes(NAMES[1:], 0.03, seed=7)
    assert len(start_fails) == 2
    unreachable = {"n0033"} - start_fails
    faults = Faults(unreachable=frozenset(unreachable), start_fails=start_fails)
    cluster = simulate(faults)
    failed = start_fails | unreachable
    healthy = sorted(set(NAMES) - failed)
    with session(inventory(tmp_path, min_nodes), tmp_path, cluster) as s:
        if min_nodes is None:
            with pytest.raises(ClusterError) as raised:
                s.bring_up(PreflightPolicy.SKIP)
            text = str(raised.value)
            for name in start_fails:
                assert f"  {name}: ray start exited 1:" in text
            assert "  n0033: SSH to 10.0.0.33 timed out" in text
            # What this run started is stopped again.
            assert cluster.running() == set()
            return
        brought = s.bring_up(PreflightPolicy.SKIP)
    left = {o.name: o.error or "" for o in brought.left_out}
    assert set(left) == failed
    assert all("raylet exited unexpectedly" in left[n] for n in start_fails)
    assert "timed out" in left["n0033"]
    assert brought.up.status is not None and sorted(brought.up.status.ready) == healthy
    assert cluster.running() == set(healthy)


def test_a_late_joiner_is_waited_for(tmp_path: Path) -> None:
    late_s = 100.0  # model seconds after its ray start: 1 s here
    cluster = simulate(Faults(join_late_s={"n0040": late_s}))
    began = time.monotonic()
    with session(inventory(tmp_path), tmp_path, cluster) as s:
        up = s.bring_up(PreflightPolicy.SKIP).up
    assert time.monotonic() - began >= late_s * SCALE
    assert up.status is not None and sorted(up.status.ready) == NAMES
    # The wait loop asked Ray more than once: it saw the node missing, then joined.
    assert cluster.operations["status"] >= 3


def test_the_checks_run_while_the_wait_loop_waits_for_a_late_joiner(tmp_path: Path) -> None:
    """Every ray start returned: the checks start at once, not after Ray's word."""
    cluster = simulate(Faults(join_late_s={"n0040": 100.0}), record_order=True)
    with session(inventory(tmp_path), tmp_path, cluster) as s:
        brought = s.bring_up(PreflightPolicy.ENFORCE)
    report = brought.preflight.report
    assert report is not None and report.exit_code == 0
    # The wait asked Ray several times; the checks, begun beside it, ran once and stood.
    assert cluster.operations["status"] >= 3
    assert cluster.operations["facts"] == NODES
    order = cluster.order
    last_status = len(order) - 1 - order[::-1].index("status")
    assert order.index("facts") < last_status, "the checks waited for Ray's last answer"


def test_checks_run_again_with_rays_answer_when_a_started_node_never_joins(
    tmp_path: Path,
) -> None:
    """min_nodes lets up go on without a node Ray never saw: the checks assumed it."""
    inv = inventory(tmp_path, min_nodes=NODES - 1, wait_timeout_s=2)
    cluster = simulate(Faults(join_late_s={"n0040": 10_000.0}))
    with session(inv, tmp_path, cluster) as s:
        brought = s.bring_up(PreflightPolicy.RECORD)
    assert brought.up.status is not None and "n0040" not in brought.up.status.ready
    assert cluster.operations["facts"] == 2 * NODES
    report = brought.preflight.report
    # The second round knew Ray's answer: nobody checked the ports of n0040.
    assert report is not None and report.reach is not None
    assert report.reach.pairs == (NODES - 1) * (NODES - 1)


def test_down_stops_every_node_even_those_that_never_started(
    tmp_path: Path,
) -> None:
    cluster = simulate(Faults(start_fails=frozenset({"n0002"})))
    inv = inventory(tmp_path, min_nodes=NODES - 1)
    with session(inv, tmp_path, cluster) as s:
        s.bring_up(PreflightPolicy.SKIP)
    assert cluster.running() == set(NAMES) - {"n0002"}
    store = StateStore(inv.name, root=tmp_path / "state")
    assert store.load() is not None
    with session(inv, tmp_path, cluster) as s:
        down = s.tear_down()
    assert sorted(down.stopped) == NAMES and not down.failed
    assert down.stopped["n0002"].stopped == 0
    assert down.stopped["n0003"].stopped == 3
    assert cluster.running() == set()
    # Every node once at rtk down, and n0002 once more at rtk up: what its failed
    # ray start left there was stopped then.
    assert cluster.operations["stop"] == NODES + 1
    assert store.load() is None


def test_the_cli_takes_the_transport_from_its_obj_and_prints_timings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = simulate()
    inv = inventory(tmp_path)
    monkeypatch.setenv("RTK_STATE_DIR", str(tmp_path / "state"))
    obj = {TRANSPORT_FACTORY: lambda _: SimulatedTransport(cluster)}

    monkeypatch.setattr(sys, "argv", ["rtk", "up", inv.source, "--no-preflight", "--json"])
    main(obj=obj)
    printed = json.loads(capsys.readouterr().out)
    assert sorted(printed["started"]) == NAMES and cluster.running() == set(NAMES)
    timings = printed["timings"]
    assert timings["probe"]["count"] == NODES
    assert timings["worker_starts"]["count"] == NODES - 1
    assert timings["start_waves"] == 1  # 63 workers: one wave of the default 64
    assert timings["wait"]["count"] >= 1
    # Phases lie within the bring-up, in order: the head starts before any worker.
    assert timings["head_start"]["end_s"] <= timings["worker_starts"]["start_s"] + 1e-3
    assert 0 < timings["worker_starts"]["end_s"] <= timings["total_s"]

    monkeypatch.setattr(sys, "argv", ["rtk", "up", inv.source, "--no-preflight", "--timings"])
    main(obj=obj)  # the cluster runs already: nothing is started, the table still prints
    out = capsys.readouterr().out
    table = out[out.index("phase ") :].splitlines()
    assert [line.split()[0] for line in table] == [
        "phase",
        "probe",
        "head",
        "worker",
        "wait",
        "total",
    ]
    assert table[2].split()[2:] == ["-", "-", "-"]  # no head start: it was running

    monkeypatch.setattr(sys, "argv", ["rtk", "down", inv.source])
    main(obj=obj)
    assert cluster.running() == set()


def test_rtk_env_reaches_the_nodes_through_the_cli_s_transport(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = simulate()
    inv = inventory(tmp_path)
    monkeypatch.setenv("RTK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(sys, "argv", ["rtk", "env", inv.source, "--json"])
    main(obj={TRANSPORT_FACTORY: lambda _: SimulatedTransport(cluster)})
    printed = json.loads(capsys.readouterr().out)
    assert [n["name"] for n in printed["nodes"]] == NAMES
    assert {n["detected"]["interface"] for n in printed["nodes"]} == {"eth0"}


def test_head_ready_comes_once_the_head_has_its_files_before_any_ray_start(
    tmp_path: Path,
) -> None:
    """rtk train --up starts its driver then: the head's env file is there to source."""
    cluster = simulate()
    seen: list[tuple[bool, int, set[str]]] = []
    with session(inventory(tmp_path), tmp_path, cluster) as s:
        env_file = s.plan.paths.env_file

        def head_ready() -> None:
            seen.append(
                (
                    (NAMES[0], env_file) in cluster.files,
                    cluster.operations["ray start"],
                    cluster.running(),
                )
            )

        brought = s.bring_up(PreflightPolicy.SKIP, head_ready=head_ready)
    assert sorted(brought.up.started) == NAMES
    assert seen == [(True, 0, set())]


def test_head_ready_is_not_called_when_the_head_fails(tmp_path: Path) -> None:
    cluster = simulate(Faults(unreachable=frozenset({NAMES[0]})))
    called: list[bool] = []
    with session(inventory(tmp_path), tmp_path, cluster) as s, pytest.raises(ClusterError):
        s.bring_up(PreflightPolicy.SKIP, head_ready=lambda: called.append(True))
    assert called == []
