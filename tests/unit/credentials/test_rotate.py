"""``rtk up --rotate-credentials``: refused on a running cluster, new token and CA on a stopped one."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.cluster.plan import ClusterPlan, build_plan
from toolkit.cluster.progress_reporter import QuietReporter
from toolkit.errors import ClusterError
from toolkit.inventory import load_inventory
from toolkit.lifecycle.down import stop_nodes
from toolkit.lifecycle.start import up
from toolkit.simulation import LatencyModel, SimulatedCluster, SimulatedTransport
from toolkit.state.store import StateStore


def plan_for(tmp_path: Path) -> ClusterPlan:
    path = tmp_path / "inv.yaml"
    nodes = "\n".join(f"  - {{host: n{i}, address: 10.9.0.{i}}}" for i in range(1, 4))
    path.write_text(f"cluster: c1\nnodes:\n{nodes}\nray:\n  tls: true\n  wait_timeout_s: 5\n")
    return build_plan(load_inventory(path))


def test_rotation_is_refused_while_the_cluster_runs_and_changes_nothing(tmp_path: Path) -> None:
    plan = plan_for(tmp_path)
    store = StateStore("c1", tmp_path / "state")
    cluster = SimulatedCluster(LatencyModel(scale=0.001))
    with SimulatedTransport(cluster) as transport:
        up(plan, transport, store, QuietReporter())
        token, ca = store.token(), store.tls.ca_cert_file.read_bytes()
        with pytest.raises(ClusterError) as raised:
            up(plan, transport, store, QuietReporter(), rotate=True)
    message = str(raised.value)
    assert "cluster c1 is running (Ray alive on n1, n2, n3)" in message
    assert "rtk down" in message and "--rotate-credentials" in message
    assert store.token() == token
    assert store.tls.ca_cert_file.read_bytes() == ca


def test_rotation_on_a_stopped_cluster_sends_a_new_token_and_ca(tmp_path: Path) -> None:
    plan = plan_for(tmp_path)
    store = StateStore("c1", tmp_path / "state")
    cluster = SimulatedCluster(LatencyModel(scale=0.001))
    with SimulatedTransport(cluster) as transport:
        up(plan, transport, store, QuietReporter())
        token, ca = store.token(), store.tls.ca_cert_file.read_bytes()
        key = cluster.files[("n2", plan.paths.tls_key_file)]
        stop_nodes(plan.nodes, transport, QuietReporter())
        result = up(plan, transport, store, QuietReporter(), rotate=True)
    assert sorted(result.started) == ["n1", "n2", "n3"]
    assert store.token() != token
    assert store.tls.ca_cert_file.read_bytes() != ca
    for name in ("n1", "n2", "n3"):
        assert cluster.files[(name, plan.paths.token_file)] == store.token().encode()
        assert cluster.files[(name, plan.paths.tls_ca_file)] == store.tls.ca_cert_file.read_bytes()
    assert cluster.files[("n2", plan.paths.tls_key_file)] != key
