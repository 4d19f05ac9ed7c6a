"""Going on without a node: ``rtk up --exclude`` through the flow, and what remembers it.

Three nodes over a scripted transport (no Ray): ``n3`` is left out. The bring-up and
its preflight touch ``n1`` and ``n2`` only; the state store keeps the exclusion, so the
next command's session plans without ``n3`` too, and the run's ``preflight.json``
(written for real, by the head's command run here in a subprocess) says so; ``rtk
down`` still stops every node. The CLI's errors and dry run run ``rtk`` as a user does.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import rtk
from scripted_transport import Call, Reply, ScriptedTransport, answer

from toolkit.cli.output.cluster import render_status
from toolkit.cluster.exclude import ExcludeError
from toolkit.cluster.progress_reporter import Reporter
from toolkit.cluster.ray_status import ClusterStatus, NodeStatus
from toolkit.flows import PreflightPolicy, Session, TrainWorkload
from toolkit.flows.bringup import bring_up, preflight
from toolkit.inventory import Inventory, load_inventory
from toolkit.lifecycle.start import RAY_READY_TEXT
from toolkit.node.facts import host_facts
from toolkit.ray_resources import host_resource
from toolkit.rundir.preflight import Exclusion, PreflightRecord
from toolkit.state.cluster_state import ClusterState
from toolkit.state.store import StateStore
from toolkit.train.config import TrainConfig

ADDRESSES = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}
SLOW = Exclusion("n3", ("net.bandwidth: 0.8 Gbit/s",))


class Quiet(Reporter):
    def node(self, name: str, message: str) -> None:
        """Drop it."""

    def info(self, message: str) -> None:
        """Drop it."""


def inventory_file(tmp_path: Path, min_nodes: int = 2) -> Path:
    data = {
        "cluster": "three",
        "min_nodes": min_nodes,
        "nodes": [{"host": name, "address": address} for name, address in ADDRESSES.items()],
        "ray": {"auth": "none", "wait_timeout_s": 5},
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def cluster(tmp_path: Path) -> ScriptedTransport:
    """Nodes that probe, start Ray, answer the head's status, give preflight facts, save."""
    transport = ScriptedTransport()
    alive: set[str] = set()

    def probe(call: Call) -> Reply:
        route = {"head_ip": ADDRESSES["n1"], "source_ip": ADDRESSES[call.node], "interface": "lo"}
        network = {"interface": "lo", "interface_source": "route", "hcas": []}
        return answer(
            {
                "route": route,
                "network": network,
                "rtk_pids": [],
                "raylet_running": False,
                "busy_ports": [],
            }
        )

    def start(call: Call) -> Reply:
        alive.add(call.node)
        return Reply(stdout=f"{RAY_READY_TEXT}\n")

    def status(call: Call) -> Reply:
        nodes = [
            {
                "node_id": f"id-{name}",
                "state": "ALIVE",
                "node_ip": ADDRESSES[name],
                "resources": {host_resource(name): 1.0, "CPU": 4.0},
            }
            for name in sorted(alive)
        ]
        return answer({"ray_version": "2.60.0", "nodes": nodes})

    facts: dict[str, Any] = json.loads(json.dumps(host_facts(str(tmp_path / "run"))))
    facts["gpus"] = {"available": False, "reason": "no pynvml"}

    def node_facts(call: Call) -> Reply:
        peers = [n for n in ADDRESSES if n != call.node and n in alive]
        reach = {f"{peer}:node_manager": {"ok": True, "ms": 0.3} for peer in peers}
        return answer({**facts, "reach": reach})

    def on_the_head(call: Call) -> Reply:
        done = subprocess.run(
            ["bash", "-c", call.command], input=call.stdin, capture_output=True, text=True
        )
        return Reply(done.returncode, done.stdout, done.stderr)

    transport.on("*", r" - ", node_facts)
    transport.on("*", r" - probe ", probe)
    transport.on("*", r"&& exec .* start ", start)
    transport.on("n1", r" - status ", status)
    transport.on("n1", r" -c ", on_the_head)
    return transport


def touched(transport: ScriptedTransport) -> set[str]:
    return {c.node for c in transport.calls}


def test_up_without_a_node_then_the_next_commands_plan_without_it(tmp_path: Path) -> None:
    inv = load_inventory(inventory_file(tmp_path))
    store = StateStore(inv.name, root=tmp_path / "state")
    transport = cluster(tmp_path)

    # rtk up --exclude n3: only n1 and n2 are brought up and checked.
    session = Session(inv, store=store, excluded=[SLOW])
    assert [n.name for n in session.plan.nodes] == ["n1", "n2"]
    brought = bring_up(session.plan, transport, store, Quiet(), PreflightPolicy.RECORD)
    assert brought.up.started == ["n1", "n2"]
    assert touched(transport) == {"n1", "n2"}
    checked = brought.preflight.report
    assert checked is not None
    assert {c.scope for c in checked.checks if c.name == "connect.node"} == {"n1", "n2"}
    assert checked.to_json()["excluded"] == [SLOW.to_json()]
    state = store.load()
    assert state is not None
    assert (state.nodes, state.excluded) == (("n1", "n2"), (SLOW,))

    # rtk train (a new session, no --exclude): the state store says n3 is out.
    later = Session(inv, store=store)
    assert later.plan.excluded == (SLOW,)
    assert [n.name for n in later.plan.nodes] == ["n1", "n2"]
    config = TrainConfig(run_dir=str(tmp_path / "run"), max_steps=2)
    run_plan = later.run_plan(TrainWorkload(config, "r1"), PreflightPolicy.RECORD).render()
    assert run_plan.splitlines()[:2] == [
        "cluster 'three': 2 node(s), head n1",
        "   excluded: n3 (net.bandwidth: 0.8 Gbit/s)",
    ]
    run_dir = tmp_path / "run"
    outcome = preflight(later.plan, transport, str(run_dir), PreflightPolicy.RECORD)
    assert outcome.saved_to == f"{run_dir}/preflight.json"
    record = PreflightRecord.read(run_dir / "preflight.json")
    assert record.excluded == (SLOW,)
    assert record.head == "n1"
    assert "n3" not in touched(transport)

    # rtk down stops every node, the excluded one too; rtk up without --exclude forgets it.
    assert "[n3]" in later.down_plan(full=True)
    assert Session(inv, store=store, excluded=()).plan.excluded == ()


def test_a_remembered_exclusion_that_no_longer_fits_says_where_it_came_from(
    tmp_path: Path,
) -> None:
    inv = load_inventory(inventory_file(tmp_path, min_nodes=3))
    store = StateStore(inv.name, root=tmp_path / "state")
    store.save(ClusterState(cluster=inv.name, excluded=(SLOW,)))
    with pytest.raises(ExcludeError, match="the last rtk up left them out") as caught:
        Session(inv, store=store)
    assert str(store.state_file) in str(caught.value)
    assert Session(inv, store=store, excluded=()).plan.excluded == ()  # what rtk down does


def test_status_lists_the_excluded_nodes_apart_from_the_missing_ones() -> None:
    status = ClusterStatus(
        "three",
        "http://10.0.0.1:8265",
        [NodeStatus("n1", "head", "10.0.0.1", alive=True), NodeStatus("n2", "worker", "10.0.0.2")],
        excluded=[SLOW],
    )
    lines = render_status(status).splitlines()
    assert lines[0] == "cluster three: 1/2 node(s) ready"
    assert lines[-2] == "  n3               excluded by rtk up: net.bandwidth: 0.8 Gbit/s"
    assert status.to_json()["excluded"] == [SLOW.to_json()]


def _inventory(tmp_path: Path, min_nodes: int = 2) -> tuple[Path, Inventory]:
    path = inventory_file(tmp_path, min_nodes)
    return path, load_inventory(path)


def test_up_dry_run_shows_what_it_leaves_out_and_touches_nothing(tmp_path: Path) -> None:
    path, _ = _inventory(tmp_path)
    listed = tmp_path / "bad.txt"
    listed.write_text("# from last night's preflight\nn3\n")
    env = {"RTK_STATE_DIR": str(tmp_path / "state")}
    done = rtk("up", str(path), "--exclude-file", str(listed), "--dry-run", env=env)
    assert done.returncode == 0, done.stderr
    assert f"  excluded   n3 (listed in {listed}:2)" in done.stdout.splitlines()
    assert "transport  ssh, 2 node(s), head n1" in done.stdout
    assert "[n3]" not in done.stdout
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("args", "min_nodes", "message"),
    [
        (["--exclude", "n[3-4]"], 2, "rtk: cannot exclude n4: not in the inventory {path}, "
         "whose nodes are n1-n3"),
        (["--exclude", "n1"], 2, "rtk: cannot exclude n1: it is the head, and a cluster cannot "
         "go on without its head; name another node as head in the inventory ({path}), then "
         "exclude n1"),
        (["--exclude", "n[2-3]"], 2, "rtk: excluding n2-n3 leaves 1 of 3 node(s), fewer than "
         "min_nodes 2; lower min_nodes in {path} to go on with 1"),
        (["--exclude", "n3"], 3, "rtk: excluding n3 leaves 2 of 3 node(s), fewer than "
         "min_nodes 3; lower min_nodes in {path} to go on with 2"),
        (["--exclude", "n[3"], 2, "rtk: --exclude: 'n[3': '[' without a matching ']'"),
    ],
)  # fmt: skip
def test_up_refuses_what_cannot_be_left_out_with_exit_2(
    tmp_path: Path, args: list[str], min_nodes: int, message: str
) -> None:
    path, inv = _inventory(tmp_path, min_nodes)
    done = rtk("up", str(path), *args, "--dry-run", env={"RTK_STATE_DIR": str(tmp_path / "s")})
    assert done.returncode == 2, done.stderr
    assert done.stderr == message.format(path=inv.source) + "\n"
