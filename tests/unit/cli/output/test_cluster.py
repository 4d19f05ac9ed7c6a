"""``rtk up``, ``rtk exec`` and ``rtk down`` on many simulated nodes: output that fits a screen.

rtk's real CLI, planner, executor, wait loop and teardown run; only the transport and
Ray's view are simulated (``toolkit.simulation``), at 1/1000 of real time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from toolkit.cli.cmd_cluster import down_cmd, up_cmd
from toolkit.cli.cmd_exec import exec_cmd
from toolkit.errors import ClusterError
from toolkit.simulation import (
    Faults,
    LatencyModel,
    SimulatedCluster,
    SimulatedTransport,
)

NODES = 256
NAMES = [f"n{i:04d}" for i in range(1, NODES + 1)]
MAX_LINES = 40


@pytest.fixture
def inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RTK_STATE_DIR", str(tmp_path / "state"))
    path = tmp_path / "inv.yaml"
    nodes = [{"host": n, "address": f"10.0.{i // 250}.{i % 250 + 1}"} for i, n in enumerate(NAMES)]
    path.write_text(
        yaml.safe_dump(
            {
                "cluster": "sim",
                "nodes": nodes,
                "min_nodes": NODES - 8,
                "ray": {"wait_timeout_s": 20},
            }
        )
    )
    return path


def simulate(monkeypatch: pytest.MonkeyPatch, faults: Faults | None = None) -> SimulatedCluster:
    cluster = SimulatedCluster(LatencyModel(scale=0.001), faults)
    monkeypatch.setattr(
        "toolkit.flows.session.make_transport", lambda inv: SimulatedTransport(cluster)
    )
    return cluster


def invoke(command: object, *args: str) -> Result:
    done = CliRunner().invoke(command, list(args))  # type: ignore[arg-type]
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise done.exception
    return done


def test_healthy_up_exec_and_down_print_at_most_40_lines(
    inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = simulate(monkeypatch)
    up = invoke(up_cmd, str(inventory), "--no-preflight")
    assert up.exit_code == 0, up.output
    assert cluster.running() == set(NAMES)
    lines = up.output.splitlines()
    assert len(lines) <= MAX_LINES, up.output
    done = f"probed {NODES}/{NODES}, started {NODES}/{NODES}, joined {NODES}/{NODES}"
    assert lines[-3].endswith(f"{NODES} of {NODES} node(s) alive")
    assert lines[-4].endswith(done)
    assert lines[-2].startswith(f"cluster sim is up: {NODES}/{NODES} node(s) alive")
    assert lines[-2].endswith(f"started: {NODES} node(s) n[0001-0{NODES}]")
    assert not any("probing" in line for line in lines)

    ran = invoke(exec_cmd, str(inventory), "--", "true")
    assert ran.exit_code == 0
    assert len(ran.output.splitlines()) == 1
    assert re.fullmatch(
        rf"exit 0 on {NODES} node\(s\) n\[0001-0{NODES}\] \([\d.-]+ s\)\n", ran.output
    )

    down = invoke(down_cmd, str(inventory))
    assert down.exit_code == 0, down.output
    assert cluster.running() == set()
    lines = down.output.splitlines()
    assert len(lines) <= MAX_LINES, down.output
    assert lines[-2].endswith(f"stopped {NODES}/{NODES}")
    assert lines[-1] == f"cluster sim: stopped {3 * NODES} process(es) on {NODES} node(s)"


def test_failures_are_grouped_by_cause_and_json_and_verbose_keep_every_node(
    inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start_fails = frozenset({"n0003", "n0004", "n0005", "n0100"})
    unreachable = frozenset({"n0200", "n0201"})
    simulate(monkeypatch, Faults(unreachable=unreachable, start_fails=start_fails))
    up = invoke(up_cmd, str(inventory), "--no-preflight")
    assert up.exit_code == 0, up.output
    lines = up.output.splitlines()
    assert len(lines) <= MAX_LINES, up.output
    groups = lines[lines.index("failed: 6 node(s), 2 cause(s)") :][:3]
    assert groups[1] == (
        "      4 node(s) n[0003-0005,0100]: ray start exited 1: raylet exited unexpectedly (simulated)"
    )
    assert re.fullmatch(
        r"      2 node\(s\) n\[0200-0201\]: SSH to <address> timed out.*", groups[2]
    )
    assert lines[lines.index(groups[-1]) + 1] == (
        "rtk: 6 node(s) left out (min_nodes 248 allows it): n[0003-0005,0100,0200-0201] "
        "(causes above; --verbose or --json for each)"
    )

    as_json = invoke(up_cmd, str(inventory), "--no-preflight", "--json")
    record = json.loads(as_json.stdout)
    failed = {n["name"] for n in record["nodes"] if n["action"] == "failed"}
    assert failed == start_fails | unreachable
    verbose = invoke(up_cmd, str(inventory), "--no-preflight", "--verbose")
    assert verbose.exit_code == 0
    # Every node said something; the ones started by the first run are left as they are.
    said = {m.group(1) for m in re.finditer(r"^\[\s*[\d.]+s\] (n\d{4}) ", verbose.stderr, re.M)}
    assert said == set(NAMES)
    assert len(verbose.output.splitlines()) > NODES

    down = CliRunner().invoke(down_cmd, [str(inventory)])
    assert isinstance(down.exception, ClusterError)
    assert str(down.exception) == "could not stop: 2 node(s) n[0200-0201] (causes above)"
    lines = down.output.splitlines()
    assert len(lines) <= MAX_LINES, down.output
    assert lines[-4].endswith(f"stopped {NODES - 2}/{NODES}, failed 2")
    assert lines[-3:] == [
        "failed: 2 node(s), 1 cause(s)",
        "      2 node(s) n[0200-0201]: SSH to <address> timed out after 10 s (simulated)",
        # The 4 nodes whose ray start failed had nothing left to stop.
        f"cluster sim: stopped {3 * (NODES - 6)} process(es) on {NODES - 2} node(s)",
    ]
