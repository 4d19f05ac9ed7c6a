"""``ray.auth`` and ``ray.tls``: what each node's files say, graded against the inventory."""

from __future__ import annotations

import datetime
from pathlib import Path

from toolkit.cluster.plan import ClusterPlan, build_plan, fill_env
from toolkit.cluster.progress_reporter import QuietReporter
from toolkit.inventory import load_inventory
from toolkit.lifecycle.start import up
from toolkit.preflight.runner import run_preflight
from toolkit.preflight.security import NodeSecurity, security_checks
from toolkit.simulation import LatencyModel, SimulatedCluster, SimulatedTransport
from toolkit.state.store import StateStore
from toolkit.state.tls import LEAF_VALIDITY, ClusterTls, new_ca, new_leaf, subject_names

NOW = datetime.datetime(2026, 11, 26, 8, 0, tzinfo=datetime.UTC)


def plan_for(tmp_path: Path, ray: str) -> ClusterPlan:
    path = tmp_path / "inv.yaml"
    nodes = "\n".join(f"  - {{host: n{i}, address: 10.9.0.{i}}}" for i in range(1, 4))
    path.write_text(f"cluster: c1\nnodes:\n{nodes}\nray:\n{ray}\n")
    return build_plan(load_inventory(path))


def node_env(plan: ClusterPlan, index: int) -> dict[str, str]:
    return fill_env(plan.nodes[index], {"node_ip": f"10.9.0.{index + 1}", "interface": "eth0"})


def secured(plan: ClusterPlan, tls: ClusterTls) -> dict[str, NodeSecurity | str]:
    found: dict[str, NodeSecurity | str] = {}
    for i, node_plan in enumerate(plan.nodes):
        leaf = tls.node(node_plan.name, [node_plan.node.address], NOW)
        found[node_plan.name] = NodeSecurity(node_env(plan, i), leaf.cert_pem, tls.ca(NOW).cert_pem)
    return found


def graded(checks: list, name: str) -> dict[str, tuple[str, str]]:
    return {c.scope: (c.status, c.measured) for c in checks if c.name == name}


def test_token_and_tls_on_everywhere_pass(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, "  tls: true")
    checks = security_checks(plan, secured(plan, ClusterTls("c1", tmp_path / "tls")), NOW)
    assert graded(checks, "ray.auth") == {n: ("pass", "token") for n in ("n1", "n2", "n3")}
    until = f"on, certificate valid until {(NOW + LEAF_VALIDITY):%Y-%m-%d}"
    assert graded(checks, "ray.tls") == {n: ("pass", until) for n in ("n1", "n2", "n3")}


def test_off_warns_and_nodes_not_up_or_unreadable_are_skipped(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, "  auth: none")
    found: dict[str, NodeSecurity | str] = {
        "n1": NodeSecurity(node_env(plan, 0)),
        "n2": NodeSecurity(None),
        "n3": "ssh: timed out",
    }
    checks = security_checks(plan, found, NOW)
    assert graded(checks, "ray.auth") == {"n1": ("warn", "disabled")}
    assert graded(checks, "ray.tls") == {"n1": ("warn", "off")}


def test_a_node_unlike_the_inventory_fails(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, "  tls: true")
    found = secured(plan, ClusterTls("c1", tmp_path / "tls"))
    old = plan_for(tmp_path, "  auth: none")  # n2 was started with the old settings
    found["n2"] = NodeSecurity(node_env(old, 1))
    checks = security_checks(plan, found, NOW)
    assert graded(checks, "ray.auth")["n2"] == ("fail", "disabled (inventory: token)")
    assert graded(checks, "ray.tls")["n2"] == ("fail", "off (inventory: on)")
    assert graded(checks, "ray.tls")["n1"][0] == "pass"


def test_expired_foreign_or_misnamed_certificates_fail(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, "  tls: true")
    found = secured(plan, ClusterTls("c1", tmp_path / "tls"))
    later = NOW + LEAF_VALIDITY + datetime.timedelta(days=1)
    expired = security_checks(plan, found, later)
    assert {s for s, _ in graded(expired, "ray.tls").values()} == {"fail"}
    assert "expired" in graded(expired, "ray.tls")["n1"][1]

    stranger = new_ca("c1", NOW)
    foreign = new_leaf(stranger, "n2", subject_names(["10.9.0.2"]), NOW)
    misnamed = ClusterTls("c1", tmp_path / "tls").node("n3x", ["10.9.0.99"], NOW)
    n2, n3 = found["n2"], found["n3"]
    assert isinstance(n2, NodeSecurity) and isinstance(n3, NodeSecurity)
    found["n2"] = NodeSecurity(n2.env, foreign.cert_pem, stranger.cert_pem)
    found["n3"] = NodeSecurity(n3.env, misnamed.cert_pem, n3.ca_pem)
    tls = graded(security_checks(plan, found, NOW), "ray.tls")
    assert tls["n1"][0] == "pass"
    assert tls["n2"] == ("fail", "its CA is not the head's")
    assert tls["n3"][0] == "fail" and "does not name 10.9.0.3" in tls["n3"][1]
    found["n3"] = NodeSecurity(n3.env, foreign.cert_pem, n3.ca_pem)
    tls = graded(security_checks(plan, found, NOW), "ray.tls")
    assert "does not verify against the cluster's CA" in tls["n3"][1]


def test_soon_expiring_warns(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, "  tls: true")
    found = secured(plan, ClusterTls("c1", tmp_path / "tls"))
    soon = NOW + LEAF_VALIDITY - datetime.timedelta(days=3)
    assert {s for s, _ in graded(security_checks(plan, found, soon), "ray.tls").values()} == {
        "warn"
    }


def test_up_sends_tls_files_and_preflight_reads_them_back(tmp_path: Path) -> None:
    """On simulated nodes: rtk up puts CA, key and certificate (0600) and the env file
    names them; preflight's reading of the same files then passes."""
    plan = plan_for(tmp_path, "  tls: true\n  wait_timeout_s: 5")
    cluster = SimulatedCluster(LatencyModel(scale=0.001))
    store = StateStore("c1", tmp_path / "state")
    with SimulatedTransport(cluster) as transport:
        up(plan, transport, store, QuietReporter())
        before = dict(cluster.operations)
        report = run_preflight(plan, transport)
        during = {k: v - before.get(k, 0) for k, v in cluster.operations.items()}
    for node_plan in plan.nodes:
        key = cluster.files[(node_plan.name, plan.paths.tls_key_file)]
        assert key == (store.tls.directory / "nodes" / f"{node_plan.name}.key").read_bytes()
        assert cluster.files[(node_plan.name, plan.paths.tls_ca_file)] == (
            store.tls.ca_cert_file.read_bytes()
        )
    # Read back by the facts call each node makes anyway: no round trip of their own.
    assert during["facts"] == len(plan.nodes)
    assert not during.get("get"), during
    security = [c for c in report.checks if c.name in ("ray.auth", "ray.tls")]
    assert len(security) == 2 * len(plan.nodes)
    assert {c.status for c in security} == {"pass"}, security
