"""rtk's real flow on 64 simulated nodes whose Ray runs in containers.

The simulated transport answers rtk's container commands (``cluster.containers.docker``) as
its nodes' runtime would; a recording transport around it keeps every command sent,
so the test sees that what ran is the plan's container start, ``exec`` and removal.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

import yaml

from toolkit.cluster.progress_reporter import QuietReporter
from toolkit.flows import PreflightPolicy, Session
from toolkit.inventory import Inventory, Node, load_inventory
from toolkit.simulation import LatencyModel, SimulatedCluster, SimulatedTransport
from toolkit.state.store import StateStore
from toolkit.transport.base import CommandResult

NODES = 64
NAMES = [f"n{i:04d}" for i in range(1, NODES + 1)]


class Recording(SimulatedTransport):
    """The simulated transport, keeping (node, command) of every command it runs."""

    def __init__(self, cluster: SimulatedCluster, sent: list[tuple[str, str]]) -> None:
        super().__init__(cluster)
        self.sent = sent
        self._sent_lock = threading.Lock()

    def run(
        self,
        node: Node,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout_s: float = 60.0,
    ) -> CommandResult:
        with self._sent_lock:
            self.sent.append((node.name, command))
        return super().run(node, command, env=env, stdin=stdin, timeout_s=timeout_s)


def inventory(tmp_path: Path) -> Inventory:
    data = {
        "cluster": "sim",
        "defaults": {"container": {"runtime": "podman", "image": "localhost/rtk-ray:1"}},
        "nodes": [{"host": "n[0001-0064]", "address": "10.0.0.[1-64]", "gpus": 0}],
        "ray": {"wait_timeout_s": 20},
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_inventory(path)


def session(inv: Inventory, tmp_path: Path, transport: SimulatedTransport) -> Session:
    store = StateStore(inv.name, root=tmp_path / "state")
    return Session(
        inv, QuietReporter(), store=store, excluded=(), transport_factory=lambda _: transport
    )


def test_64_containers_come_up_take_commands_and_are_removed(tmp_path: Path) -> None:
    cluster = SimulatedCluster(LatencyModel(scale=0.01))
    inv = inventory(tmp_path)
    sent: list[tuple[str, str]] = []
    with session(inv, tmp_path, Recording(cluster, sent)) as s:
        up = s.bring_up(PreflightPolicy.ENFORCE).up
        assert sorted(up.started) == NAMES
        starts = {n: c for n, c in sent if c.startswith("podman run -d ")}
        assert starts == {n.name: n.start_command for n in s.plan.nodes}
        assert cluster.containers == {name: f"rtk-sim-{name}" for name in NAMES}
        sent.clear()
        runs = s.exec(["nvidia-smi", "-L"])
        assert [r.node for r in runs if r.ok] == NAMES
        assert {c.split(" sh -c ")[0] for _, c in sent} == {
            f"podman exec -i rtk-sim-{name}" for name in NAMES
        }
    sent.clear()
    with session(inv, tmp_path, Recording(cluster, sent)) as s:
        down = s.tear_down()
    assert sorted(down.stopped) == NAMES and not down.failed
    assert {n: a.containers_removed for n, a in down.stopped.items()} == {
        name: (f"rtk-sim-{name}",) for name in NAMES
    }
    assert cluster.containers == {} and cluster.running() == set()
    assert cluster.operations["remove container"] == NODES
    # On each node the container goes first, then the agent cleans up after it.
    for name in NAMES:
        mine = [c for n, c in sent if n == name]
        assert mine[0].startswith("command -v podman >/dev/null || exit 0; ids=$(podman ps ")
        assert " - stop " in mine[1]


def test_a_second_up_finds_the_containers_running(tmp_path: Path) -> None:
    cluster = SimulatedCluster(LatencyModel(scale=0.01))
    inv = inventory(tmp_path)
    with session(inv, tmp_path, SimulatedTransport(cluster)) as s:
        s.bring_up(PreflightPolicy.SKIP)
    sent: list[tuple[str, str]] = []
    with session(inv, tmp_path, Recording(cluster, sent)) as s:
        up = s.bring_up(PreflightPolicy.SKIP).up
    assert up.started == []
    assert {o.action for o in up.nodes} == {"already running"}
    assert not [c for _, c in sent if c.startswith("podman run ")]
    assert cluster.operations["ray start"] == NODES
