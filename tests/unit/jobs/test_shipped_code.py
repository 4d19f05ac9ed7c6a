"""Whether jobs ship rtk's source: the digest on both sides, and what ``rtk up`` keeps.

The bring-ups run on the simulated transport, whose probe answers for a node that
imports this very rtk, or none (``Faults.other_rtk``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from toolkit.flows.outcome import PreflightPolicy
from toolkit.flows.session import Session
from toolkit.inventory import load_inventory
from toolkit.jobs.shipped_code import (
    code_env,
    known_same,
    local_digest,
    package_dir,
    shared_digest,
)
from toolkit.node.common import source_digest
from toolkit.nodeinfo import agent_source
from toolkit.simulation import (
    Faults,
    LatencyModel,
    SimulatedCluster,
    SimulatedTransport,
)
from toolkit.state.cluster_state import ClusterState
from toolkit.state.store import StateStore
from toolkit.train.config import TrainConfig
from toolkit.workloads import TrainWorkload

WORKLOAD = TrainWorkload(TrainConfig(run_dir="/tmp/run"), "run1")


def copy_of_rtk(into: Path) -> Path:
    target = into / "toolkit"
    shutil.copytree(package_dir(), target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_a_copy_has_the_same_digest_and_any_changed_byte_or_file_another(tmp_path: Path) -> None:
    copy = copy_of_rtk(tmp_path)
    assert source_digest(str(copy)) == local_digest()
    # Compiled files do not count: a node that ran rtk once has them.
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"compiled")
    (copy / "shell.pyc").write_bytes(b"compiled")
    assert source_digest(str(copy)) == local_digest()
    errors = copy / "errors.py"
    errors.write_bytes(errors.read_bytes() + b"\n")
    assert source_digest(str(copy)) != local_digest()
    errors.write_bytes(errors.read_bytes()[:-1])
    assert source_digest(str(copy)) == local_digest()
    (copy / "extra.py").write_text("")
    assert source_digest(str(copy)) != local_digest()
    # A file moved to another folder is another source, though its bytes are the same.
    (copy / "extra.py").rename(copy / "cli" / "extra.py")
    moved = source_digest(str(copy))
    (copy / "cli" / "extra.py").rename(copy / "extra.py")
    assert moved != source_digest(str(copy))


def test_the_probe_finds_an_installed_rtk_but_not_one_in_its_current_folder(
    tmp_path: Path,
) -> None:
    installed = tmp_path / "site"
    copy_of_rtk(installed)
    workdir = tmp_path / "work"
    copy_of_rtk(workdir)
    (workdir / "toolkit" / "errors.py").write_text("# another rtk\n")
    # The agent's text as sent (``python -``), up to its command dispatch.
    probe = "import json, sys; sys.path.append(sys.argv[1]); " + (
        "exec(open(sys.argv[2]).read().split('\\nif __name__')[0]); print(json.dumps(rtk_source()))"
    )
    agent_file = tmp_path / "agent.py"
    agent_file.write_text(agent_source(), encoding="utf-8")

    def ask(extra_path: str) -> Any:
        done = subprocess.run(
            # -S: no site-packages, where this venv has rtk installed itself.
            [sys.executable, "-I", "-S", "-c", probe, extra_path, str(agent_file)],
            cwd=workdir,
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(done.stdout)

    found = ask(str(installed))
    assert found == {"path": str(installed / "toolkit"), "digest": local_digest()}
    # Only the current folder has one: Ray's workers would not import it.
    assert ask(str(tmp_path / "nowhere")) is None


def test_the_state_keeps_the_digest_only_when_every_node_had_this_one() -> None:
    here = local_digest()
    assert shared_digest([here, here]) == here
    assert shared_digest([here, None]) is None
    assert shared_digest([here, "0" * 64]) is None
    assert shared_digest([]) is None
    assert known_same(ClusterState(nodes_rtk_digest=here))
    assert not known_same(ClusterState(nodes_rtk_digest="0" * 64))
    assert not known_same(ClusterState()) and not known_same(None)


def inventory_file(tmp_path: Path, min_nodes: int | None = None) -> Path:
    data: dict[str, Any] = {
        "cluster": "code",
        "nodes": [{"host": f"n{i}", "address": f"10.0.0.{i}"} for i in range(1, 5)],
        "ray": {"auth": "none"},
    }
    if min_nodes is not None:
        data["min_nodes"] = min_nodes
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def bring_up_and_ask(
    tmp_path: Path, faults: Faults, min_nodes: int | None = None
) -> tuple[ClusterState, bool]:
    """Bring a simulated cluster up; its state after, and whether a job would ship rtk."""
    cluster = SimulatedCluster(LatencyModel(scale=0.0), faults)
    inv = load_inventory(inventory_file(tmp_path, min_nodes))
    store = StateStore(inv.name, root=tmp_path / "state")

    def factory(_: Any) -> SimulatedTransport:
        return SimulatedTransport(cluster)

    with Session(inv, store=store, transport_factory=factory) as session:
        session.bring_up(PreflightPolicy.SKIP)
    # A later command (rtk train) is another process: it reads the state.
    with Session(inv, store=store) as later:
        ships = "py_modules" in later.job_request(WORKLOAD).runtime_env
    return store.load() or ClusterState(), ships


def test_rtk_up_lets_jobs_skip_shipping_when_every_node_has_this_rtk(tmp_path: Path) -> None:
    state, ships = bring_up_and_ask(tmp_path / "same", Faults())
    assert state.nodes_rtk_digest == local_digest() and not ships
    state, ships = bring_up_and_ask(tmp_path / "one-without", Faults(other_rtk=frozenset({"n3"})))
    assert state.nodes_rtk_digest is None and ships
    assert "nodes_rtk_digest" not in json.loads(
        StateStore("code", tmp_path / "one-without" / "state").state_file.read_text()
    )


def test_a_node_left_out_does_not_count(tmp_path: Path) -> None:
    # n4 fails to start (min_nodes allows it): the jobs run where the others are.
    faults = Faults(start_fails=frozenset({"n4"}), other_rtk=frozenset({"n4"}))
    state, ships = bring_up_and_ask(tmp_path, faults, min_nodes=3)
    assert state.nodes_rtk_digest == local_digest() and not ships


def test_another_rtk_here_since_rtk_up_ships_its_own(tmp_path: Path) -> None:
    inv = load_inventory(inventory_file(tmp_path))
    store = StateStore(inv.name, root=tmp_path / "state")
    store.save(ClusterState(cluster="code", nodes_rtk_digest="0" * 64))
    with Session(inv, store=store) as session:
        request = session.job_request(WORKLOAD)
    assert request.runtime_env["py_modules"] == [package_dir()]
    assert code_env(False) == {}
