"""Issue-scale acceptance: rtk's CLI on 1,024 simulated nodes.

The commands run as a user runs them (``main`` with its arguments), their transport
the simulation's (``main(obj=...)``); everything else is rtk's own. Time runs at 1/100
(a 5 s ``ray start`` takes 50 ms, and so do the pauses between start waves). Each command's terminal output is counted: a healthy
1,024-node ``up``, ``preflight`` and ``down`` fit in 40 lines.
"""

from __future__ import annotations

import _thread
import json
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from toolkit.cli import TRANSPORT_FACTORY, main
from toolkit.inventory.hostrange import expand_hosts
from toolkit.simulation import (
    Faults,
    LatencyModel,
    SimulatedCluster,
    SimulatedTransport,
    pick_nodes,
)

NODES = 1024
NAMES = [f"n{i:04d}" for i in range(1, NODES + 1)]
MAX_LINES = 40
SCALE = 0.01


def inventory(tmp_path: Path, min_nodes: int | None = None) -> str:
    data: dict[str, Any] = {
        "cluster": "sim1024",
        "nodes": [
            {"host": n, "address": f"10.0.{(i + 1) // 256}.{(i + 1) % 256}"}
            for i, n in enumerate(NAMES)
        ],
        # Start waves are paced in real seconds: at 1/100 time, 0.5 s between waves
        # becomes 5 ms, as the model's other seconds do.
        "ray": {"wait_timeout_s": 600, "start_wave_interval_s": 0.005},
    }
    if min_nodes is not None:
        data["min_nodes"] = min_nodes
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


class Cli:
    """Runs rtk commands on one simulated cluster; keeps each one's exit code and output."""

    def __init__(
        self,
        cluster: SimulatedCluster,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        self.cluster = cluster
        self.monkeypatch = monkeypatch
        self.capsys = capsys

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.monkeypatch.setattr(sys, "argv", ["rtk", *args])
        code = 0
        try:
            main(obj={TRANSPORT_FACTORY: lambda _: SimulatedTransport(self.cluster)})
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        out, err = self.capsys.readouterr()
        return code, out, err


@pytest.fixture
def rtk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[[SimulatedCluster], Cli]:
    monkeypatch.setenv("RTK_STATE_DIR", str(tmp_path / "state"))
    return lambda cluster: Cli(cluster, monkeypatch, capsys)


def lines(out: str, err: str) -> int:
    return len((out + err).splitlines())


def simulated(faults: Faults | None = None) -> SimulatedCluster:
    return SimulatedCluster(LatencyModel(scale=SCALE), faults)


def test_1024_healthy_nodes_come_up_are_checked_and_go_down_within_40_lines(
    tmp_path: Path, rtk: Callable[[SimulatedCluster], Cli]
) -> None:
    cluster = simulated()
    cli = rtk(cluster)
    inv = inventory(tmp_path)
    code, out, err = cli("up", inv, "--no-preflight")
    assert code == 0, err[-2000:]
    assert cluster.running() == set(NAMES)
    assert sorted(cluster.registered()) == NAMES
    assert f"{NODES}/{NODES} node(s) alive" in out
    assert lines(out, err) <= MAX_LINES, out + err

    code, out, err = cli("preflight", inv, "--output-dir", str(tmp_path / "run"))
    assert code == 0, (out + err)[-3000:]
    assert lines(out, err) <= MAX_LINES, out + err

    code, out, err = cli("down", inv)
    assert code == 0, err[-2000:]
    assert cluster.running() == set()
    assert cluster.operations["stop"] == NODES
    assert lines(out, err) <= MAX_LINES, out + err


def test_one_percent_failing_are_named_and_left_out_when_min_nodes_allows(
    tmp_path: Path, rtk: Callable[[SimulatedCluster], Cli]
) -> None:
    failing = pick_nodes(NAMES[1:], 0.01, seed=11)
    assert len(failing) == 10
    cluster = simulated(Faults(start_fails=failing))
    cli = rtk(cluster)
    healthy = set(NAMES) - failing

    # Without min_nodes: up fails, names every failed node, stops what it started.
    code, out, err = cli("up", inventory(tmp_path), "--no-preflight")
    assert code != 0
    assert "fewer than min_nodes=1024" in err
    shown = err + out
    assert all(name in shown or _in_a_range(name, shown) for name in failing), shown
    assert cluster.running() == set()
    assert lines(out, err) <= MAX_LINES, out + err

    # With min_nodes: the cluster comes up without them; --json names each one.
    code, out, err = cli("up", inventory(tmp_path, min_nodes=1000), "--no-preflight", "--json")
    assert code == 0, err[-2000:]
    printed = json.loads(out)
    left = {n["name"]: n["error"] for n in printed["nodes"] if n["action"] == "failed"}
    assert set(left) == failing
    assert all("raylet exited unexpectedly" in why for why in left.values())
    assert cluster.running() == healthy
    assert sorted(printed["status"]["alive"]) == sorted(healthy)
    assert "ray start exited 1" in err  # the cause, once, grouped
    assert lines("", err) <= MAX_LINES, err
    code, _, _ = cli("down", inventory(tmp_path, min_nodes=1000))
    assert code == 0 and cluster.running() == set()


def _in_a_range(name: str, text: str) -> bool:
    """Whether ``name`` is inside a hostlist range printed in ``text`` (n[0001-0003,...])."""
    return any(name in expand_hosts(r) for r in re.findall(r"n\[[0-9,-]+\]", text))


def test_a_node_that_joins_late_is_waited_for(
    tmp_path: Path, rtk: Callable[[SimulatedCluster], Cli]
) -> None:
    late_s = 200.0  # model seconds: 2 s here
    cluster = simulated(Faults(join_late_s={"n0777": late_s}))
    cli = rtk(cluster)
    began = time.monotonic()
    code, out, err = cli("up", inventory(tmp_path), "--no-preflight")
    assert code == 0, err[-2000:]
    assert time.monotonic() - began >= late_s * SCALE
    assert sorted(cluster.registered()) == NAMES
    assert f"{NODES}/{NODES} node(s) alive" in out
    assert cluster.operations["status"] >= 3  # it asked Ray again until n0777 joined
    cli("down", inventory(tmp_path))
    assert cluster.running() == set()


def test_ctrl_c_during_up_stops_what_was_started(
    tmp_path: Path, rtk: Callable[[SimulatedCluster], Cli]
) -> None:
    cluster = simulated()
    cli = rtk(cluster)
    interrupted_at: list[int] = []

    def press_ctrl_c() -> None:
        deadline = time.monotonic() + 60
        while cluster.ray_starts < 300 and time.monotonic() < deadline:
            time.sleep(0.002)
        interrupted_at.append(cluster.ray_starts)
        _thread.interrupt_main()  # as a Ctrl-C reaches the main thread

    presser = threading.Thread(target=press_ctrl_c, daemon=True)
    presser.start()
    code, out, err = cli("up", inventory(tmp_path), "--no-preflight")
    presser.join()
    assert code == 130, err[-2000:]
    assert interrupted_at and interrupted_at[0] < NODES, "Ctrl-C came after every start"
    # Everything this run started is stopped, including starts in flight at the time.
    assert cluster.ray_starts >= interrupted_at[0]
    assert cluster.running() == set()
    assert cluster.operations["stop"] >= interrupted_at[0]
    assert lines(out, err) <= MAX_LINES, out + err
