"""Network environment profiles: facts from recorded sysfs trees, variables and reasons.

The trees under tests/data/sysfs/ follow real sysfs names and value formats: an
InfiniBand node (two HCAs, one port down), a RoCE node, a bonded node (bond0 over two
RoCE netdevs) and an Ethernet-only node. See tests/data/sysfs/README.md.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO
from scripted_transport import Reply, ScriptedTransport

from toolkit.cluster.plan import NETWORK_AFTER, build_plan, fill_env
from toolkit.cluster.plan_text import env_file, render_up
from toolkit.cluster.progress_reporter import QuietReporter
from toolkit.errors import ClusterError, NetEnvError
from toolkit.inventory import load_inventory
from toolkit.lifecycle.node_start import NodeOutcome, prepare_node
from toolkit.netenv import (
    FORBIDDEN,
    PROFILES,
    choose_env,
    describe_profile,
    env_for_node,
    inventory_overrides,
)
from toolkit.netenv.detect import detect_network
from toolkit.netenv.profiles import DEPRECATED_NAMES, OVERRIDE_REASON
from toolkit.netenv.report_text import render_network
from toolkit.node.agent import network_facts
from toolkit.nodeinfo.network_facts import NetworkFacts
from toolkit.shell import parse_env_file

SYSFS = REPO / "tests" / "data" / "sysfs"
# fixture -> the interface toward the head on that node
ROUTES = {"ib": "ib0", "roce": "eth0", "bond": "bond0", "ethernet": "eth0"}


def facts_of(fixture: str, interface: str | None = None, **extra: Any) -> dict[str, Any]:
    facts = network_facts(interface or ROUTES[fixture], str(SYSFS / fixture))
    return {**facts, "interface_source": "route", **extra}


def ports_by_name(facts: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{h['name']}:{p['port']}": p for h in facts["hcas"] for p in h["ports"]}


# --- facts (the agent's network_facts) on each recorded tree -----------------------


def test_ib_node_facts() -> None:
    facts = network_facts("ib0", str(SYSFS / "ib"))
    assert facts["infiniband"] is True
    assert facts["link"]["type"] == "infiniband"
    assert facts["link"]["mtu"] == 4092
    assert facts["link"]["speed_mbps"] == 200000
    ports = ports_by_name(facts)
    assert sorted(ports) == ["mlx5_0:1", "mlx5_1:1"]
    up, down = ports["mlx5_0:1"], ports["mlx5_1:1"]
    assert (up["state"], up["phys_state"], up["link_layer"]) == ("ACTIVE", "LinkUp", "InfiniBand")
    assert up["rate"] == "200 Gb/sec (4X HDR)" and up["rate_gbps"] == 200.0
    assert up["netdevs"] == ["ib0"] and up["backs_route"] is True
    assert (down["state"], down["phys_state"]) == ("DOWN", "Polling")
    assert down["netdevs"] == ["ib1"] and down["backs_route"] is False
    # IB GIDs carry no netdev; zero entries of the table are skipped.
    assert [g["index"] for g in up["gids"]] == [0] and up["gids"][0]["ndev"] is None
    assert facts["route_ports"] == ["mlx5_0:1"]
    assert "error" not in facts


def test_ib_node_routed_over_ethernet_has_no_route_port() -> None:
    facts = network_facts("eno1", str(SYSFS / "ib"))
    assert facts["link"]["type"] == "ether" and facts["link"]["speed_mbps"] == 25000
    assert facts["route_ports"] == []


def test_down_ipoib_link_reports_no_speed() -> None:
    facts = network_facts("ib1", str(SYSFS / "ib"))
    assert facts["link"]["operstate"] == "down"
    assert facts["link"]["speed_mbps"] is None  # sysfs says -1


def test_roce_node_facts() -> None:
    facts = network_facts("eth0", str(SYSFS / "roce"))
    port = ports_by_name(facts)["mlx5_0:1"]
    assert port["link_layer"] == "Ethernet" and port["state"] == "ACTIVE"
    assert port["rate"] == "100 Gb/sec (4X EDR)"
    assert port["netdevs"] == ["eth0"] and port["gid_netdevs"] == ["eth0"]
    assert [(g["index"], g["type"]) for g in port["gids"]] == [
        (0, "IB/RoCE v1"),
        (1, "RoCE v2"),
        (2, "IB/RoCE v1"),
        (3, "RoCE v2"),
    ]
    assert facts["route_ports"] == ["mlx5_0:1"]
    assert facts["link"]["mtu"] == 9000 and facts["link"]["bond"] is None


def test_bonded_node_facts() -> None:
    facts = network_facts("bond0", str(SYSFS / "bond"))
    link = facts["link"]
    assert link["bond"]["mode"] == "802.3ad"
    assert [s["name"] for s in link["bond"]["slaves"]] == ["eth2", "eth3"]
    assert all(s["master"] == "bond0" and s["speed_mbps"] == 100000 for s in link["bond"]["slaves"])
    assert facts["route_devices"] == ["bond0", "eth2", "eth3"]
    ports = ports_by_name(facts)
    assert ports["mlx5_0:1"]["netdevs"] == ["eth2"] and ports["mlx5_1:1"]["netdevs"] == ["eth3"]
    assert ports["mlx5_0:1"]["gid_netdevs"] == ["bond0"]
    assert facts["route_ports"] == ["mlx5_0:1", "mlx5_1:1"]
    slave = network_facts("eth2", str(SYSFS / "bond"))
    assert slave["link"]["master"] == "bond0" and slave["route_ports"] == ["mlx5_0:1"]


def test_ethernet_only_node_facts() -> None:
    facts = network_facts("eth0", str(SYSFS / "ethernet"))
    assert facts["infiniband"] is False and facts["hcas"] == [] and facts["route_ports"] == []
    assert facts["link"]["mtu"] == 1500 and facts["link"]["speed_mbps"] == 25000


def test_facts_never_raise(tmp_path: Path) -> None:
    assert network_facts(None, str(tmp_path / "nothing"))["hcas"] == []
    missing = network_facts("eth9", str(SYSFS / "ethernet"))
    assert missing["link"]["exists"] is False and missing["link"]["mtu"] is None
    # Odd entries: a non-numeric port dir, empty and garbage files, a dangling netdev.
    ib = tmp_path / "sys/class/infiniband/mlx5_9"
    (ib / "ports/1").mkdir(parents=True)
    (ib / "ports/notaport").mkdir()
    (ib / "ports/1/state").write_text("")
    (ib / "ports/1/rate").write_text("garbage\n")
    (ib / "device/net").mkdir(parents=True)
    (ib / "device/net/ghost").symlink_to("../../../../net/ghost")
    facts = network_facts("ghost", str(tmp_path))
    assert "error" not in facts
    (port,) = ports_by_name(facts).values()
    assert port["state"] is None and port["rate_gbps"] is None and port["netdevs"] == ["ghost"]


def test_vlan_and_software_rdma(tmp_path: Path) -> None:
    root = tmp_path
    shutil.copytree(SYSFS / "roce", root, symlinks=True, dirs_exist_ok=True)
    vlan = root / "sys/class/net/eth0.100"
    vlan.mkdir()
    (vlan / "mtu").write_text("9000\n")
    (vlan / "lower_eth0").symlink_to("../eth0")
    facts = network_facts("eth0.100", str(root))
    assert facts["route_devices"] == ["eth0.100", "eth0"]
    assert facts["route_ports"] == ["mlx5_0:1"]
    # Soft-RoCE (rxe) is reported but never chosen.
    rxe = root / "sys/class/infiniband/rxe0"
    shutil.rmtree(root / "sys/class/infiniband/mlx5_0")
    (rxe / "ports/1").mkdir(parents=True)
    for name, text in {"state": "4: ACTIVE", "link_layer": "Ethernet", "rate": "10 Gb/sec"}.items():
        (rxe / "ports/1" / name).write_text(text + "\n")
    (rxe / "parent").write_text("eth0\n")
    raw = network_facts("eth0", str(root))
    assert raw["hcas"][0]["software"] is True
    env = choose_env("auto", {**raw, "interface_source": "route"})
    assert env.profile == "ethernet" and env.variables["NCCL_NET"] == "Socket"
    assert "software RDMA" in env.profile_reason


def test_probe_reports_the_network() -> None:
    from toolkit.node.agent import probe

    answer = probe("127.0.0.1", "/tmp/rtk-netenv-test-none", "")
    network = answer["network"]
    assert network["interface"] == answer["route"]["interface"]
    assert network["interface_source"] == "head"
    assert probe("127.0.0.1", "/tmp/rtk-netenv-test-none", "", "lo")["network"][
        "interface_source"
    ] == ("inventory")


# --- profiles: variables and reasons ------------------------------------------------

EXPECTED: dict[tuple[str, str], dict[str, str] | str] = {
    ("ib", "auto"): {"NCCL_IB_HCA": "=mlx5_0:1", "profile": "ib"},
    ("ib", "ib"): {"NCCL_IB_HCA": "=mlx5_0:1", "profile": "ib"},
    ("ib", "roce"): "no RoCE (Ethernet link layer) port is active",
    ("ib", "ethernet"): {"NCCL_SOCKET_NTHREADS": "4", "NCCL_NSOCKS_PERTHREAD": "4"},
    ("roce", "auto"): {"NCCL_IB_HCA": "=mlx5_0:1", "profile": "roce"},
    ("roce", "ib"): "no InfiniBand port is active there; found mlx5_0:1 Ethernet ACTIVE",
    ("roce", "roce"): {"NCCL_IB_HCA": "=mlx5_0:1", "profile": "roce"},
    ("roce", "ethernet"): {"NCCL_SOCKET_NTHREADS": "4", "NCCL_NSOCKS_PERTHREAD": "4"},
    ("bond", "auto"): {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "profile": "roce"},
    ("bond", "ib"): "no InfiniBand port is active there",
    ("bond", "roce"): {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "profile": "roce"},
    ("bond", "ethernet"): {"NCCL_SOCKET_NTHREADS": "4", "NCCL_NSOCKS_PERTHREAD": "4"},
    ("ethernet", "auto"): {"NCCL_NET": "Socket", "profile": "ethernet"},
    ("ethernet", "ib"): "found no RDMA devices, no /sys/class/infiniband",
    ("ethernet", "roce"): "found no RDMA devices, no /sys/class/infiniband",
    ("ethernet", "ethernet"): {
        "NCCL_NET": "Socket",
        "NCCL_SOCKET_NTHREADS": "2",
        "NCCL_NSOCKS_PERTHREAD": "4",
    },
}


@pytest.mark.parametrize(("fixture", "profile"), sorted(EXPECTED))
def test_profile_on_fixture(fixture: str, profile: str) -> None:
    expected = EXPECTED[(fixture, profile)]
    facts = facts_of(fixture)
    if isinstance(expected, str):
        with pytest.raises(NetEnvError, match="gpu07: network.profile") as info:
            choose_env(profile, facts, node="gpu07")
        assert expected in str(info.value)
        assert info.value.exit_code == 4 and isinstance(info.value, ClusterError)
        return
    env = choose_env(profile, facts, node="gpu07")
    want = dict(expected)
    assert env.profile == want.pop("profile", profile)
    assert env.requested == profile
    for key, value in want.items():
        assert env.variables[key] == value, key
    interface = ROUTES[fixture]
    assert env.variables["GLOO_SOCKET_IFNAME"] == env.variables["NCCL_SOCKET_IFNAME"] == interface
    assert list(env.settings)[:2] == ["GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"]
    assert all(s.reason for s in env.settings.values())
    if env.profile in ("ib", "roce"):
        assert env.variables["NCCL_IB_TIMEOUT"] == "22"
        assert env.variables["NCCL_IB_RETRY_CNT"] == "7"
        assert env.hca_ports == tuple(env.variables["NCCL_IB_HCA"][1:].split(","))
        assert "NCCL_NET" not in env.variables
        assert any("NCCL_IB_GID_INDEX left unset" in n for n in env.notes)
    else:
        assert not any(k.startswith("NCCL_IB_") for k in env.variables)


@pytest.mark.parametrize("fixture", sorted(ROUTES))
@pytest.mark.parametrize("profile", PROFILES)
def test_no_forbidden_variable_ever(fixture: str, profile: str) -> None:
    try:
        env = choose_env(profile, facts_of(fixture))
    except NetEnvError:
        return
    variables = env.variables
    assert not set(variables) & {*FORBIDDEN, "NCCL_IB_GID_INDEX", *DEPRECATED_NAMES}
    assert not any(k.endswith(("P2P_DISABLE", "SHM_DISABLE")) for k in variables)
    if "NCCL_IB_TIMEOUT" in variables:
        assert 20 <= int(variables["NCCL_IB_TIMEOUT"]) <= 22
    if "NCCL_IB_RETRY_CNT" in variables:
        assert int(variables["NCCL_IB_RETRY_CNT"]) <= 7
    if "NCCL_SOCKET_NTHREADS" in variables:
        product = int(variables["NCCL_SOCKET_NTHREADS"]) * int(variables["NCCL_NSOCKS_PERTHREAD"])
        assert product <= 64
    if "NCCL_NET" in variables:
        assert variables["NCCL_NET"] == "Socket"
        assert not [p for p in NetworkFacts.from_json(facts_of(fixture)).ports if p.usable]


def test_reasons_say_why() -> None:
    ib = choose_env("auto", facts_of("ib"))
    assert ib.profile_reason == "auto: active InfiniBand port(s) mlx5_0:1"
    assert "left out: mlx5_1:1 (DOWN, InfiniBand)" in ib.settings["NCCL_IB_HCA"].reason
    assert ib.settings["NCCL_SOCKET_IFNAME"].reason == "on the route to the head (ip route get)"
    roce = choose_env("auto", facts_of("roce"))
    assert "mlx5_0:1 back(s) eth0, the interface toward the head" in roce.profile_reason
    assert "RoCE v2" in " ".join(roce.notes)
    eth = choose_env("auto", facts_of("ethernet"))
    assert "no active InfiniBand or RoCE port" in eth.profile_reason
    assert "no RDMA devices" in eth.profile_reason
    assert "NCCL uses TCP" in eth.settings["NCCL_NET"].reason
    assert "2 threads x 4 sockets = 8 (<= 64): 25 Gb/s link" in (
        eth.settings["NCCL_SOCKET_NTHREADS"].reason
    )


def test_auto_prefers_roce_off_the_route_over_tcp() -> None:
    # bond fixture, but the head is reached over the 1G management NIC eno1.
    env = choose_env("auto", facts_of("bond", "eno1"))
    assert env.profile == "roce" and env.variables["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert "not under eno1" in env.profile_reason
    assert env.variables["NCCL_SOCKET_IFNAME"] == "eno1"
    # IB node reached over Ethernet: still ib.
    assert choose_env("auto", facts_of("ib", "eno1")).profile == "ib"


def test_forced_ethernet_on_an_rdma_node_leaves_nccl_net_alone() -> None:
    env = choose_env("ethernet", facts_of("roce"))
    assert "NCCL_NET" not in env.variables
    assert any("NCCL_NET left unset: mlx5_0:1 active" in n for n in env.notes)


def test_interface_sources_and_missing_interface() -> None:
    head = choose_env("auto", facts_of("ethernet", interface_source="head"))
    assert "owns the head's address" in head.settings["GLOO_SOCKET_IFNAME"].reason
    given = choose_env("auto", facts_of("ethernet", interface_source="inventory"))
    assert given.settings["NCCL_SOCKET_IFNAME"].reason == "network.interface in the inventory"
    with pytest.raises(NetEnvError, match="n1: no interface toward the head"):
        choose_env("auto", {**facts_of("ethernet"), "interface": None}, node="n1")
    with pytest.raises(NetEnvError, match="'infiniband' is not one of auto, ib, roce"):
        choose_env("infiniband", facts_of("ib"))


def test_low_mtu_roce_gets_a_note(tmp_path: Path) -> None:
    shutil.copytree(SYSFS / "roce", tmp_path, symlinks=True, dirs_exist_ok=True)
    (tmp_path / "sys/class/net/eth0/mtu").write_text("1500\n")
    raw = network_facts("eth0", str(tmp_path))
    env = choose_env("roce", raw)
    assert any("MTU 1500 on eth0" in n for n in env.notes)


def test_overrides_win_and_say_so() -> None:
    overrides = {
        "NCCL_IB_HCA": "=mlx5_1:1",
        "NCCL_IB_TIMEOUT": "20",
        "NCCL_DEBUG": "INFO",
        "NCCL_SOCKET_IFNAME": "ib1",
        "NCCL_ALGO": "Ring",
        "NCCL_ASYNC_ERROR_HANDLING": "1",
    }
    env = choose_env("ib", facts_of("ib"), overrides)
    for key, value in overrides.items():
        assert env.settings[key].value == value
        assert env.settings[key].reason == OVERRIDE_REASON
    assert env.variables["GLOO_SOCKET_IFNAME"] == "ib0"  # not overridden
    assert env.settings["NCCL_IB_RETRY_CNT"].reason != OVERRIDE_REASON
    notes = " ".join(env.notes)
    assert "NCCL_ALGO comes from the inventory" in notes
    assert "write TORCH_NCCL_ASYNC_ERROR_HANDLING" in notes
    # An override even lets a TCP-only node run with the profile's variables replaced.
    eth = choose_env("auto", facts_of("ethernet"), {"NCCL_NET": "IB"})
    assert eth.variables["NCCL_NET"] == "IB"


def test_inventory_overrides_precedence() -> None:
    merged = inventory_overrides(
        {"NCCL_IB_TIMEOUT": "21", "NCCL_DEBUG": "WARN"},
        {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "8", "TORCH_NCCL_BLOCKING_WAIT": "1"},
    )
    assert merged == {
        "NCCL_IB_TIMEOUT": "21",
        "NCCL_DEBUG": "INFO",
        "TORCH_NCCL_BLOCKING_WAIT": "1",
    }


def test_json_shape() -> None:
    data = json.loads(json.dumps(choose_env("auto", facts_of("bond")).to_json()))
    assert data["profile"] == "roce" and data["requested"] == "auto"
    assert data["hca_ports"] == ["mlx5_0:1", "mlx5_1:1"]
    assert data["variables"]["NCCL_IB_HCA"] == {
        "value": "=mlx5_0:1,mlx5_1:1",
        "reason": "exact (=) names of the active RoCE ports",
    }


# --- integration: the plan, the env file, rtk up's preparation ---------------------


def write_inventory(tmp_path: Path, profile: str = "auto", **network: Any) -> Path:
    data = {
        "cluster": "nettest",
        "nodes": [
            {"host": "n1", "address": "10.10.0.11"},
            {"host": "n2", "address": "10.10.0.12", "env": {"NCCL_DEBUG": "INFO"}},
        ],
        "defaults": {"env": {"OMP_NUM_THREADS": 4}},
        "network": {"profile": profile, **network},
        "ray": {"auth": "none"},
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_fill_env_places_the_profile_after_the_socket_interface(tmp_path: Path) -> None:
    inv = load_inventory(write_inventory(tmp_path, env={"NCCL_IB_TIMEOUT": 20}))
    plan = build_plan(inv)
    worker = plan.workers[0]
    chosen = env_for_node(inv, worker.node, facts_of("ib"))
    env = fill_env(worker, {"node_ip": "10.10.0.12", "interface": "ib0"}, chosen.variables)
    keys = list(env)
    at = keys.index(NETWORK_AFTER)
    assert keys[at + 1 : at + 3] == ["NCCL_IB_HCA", "NCCL_IB_RETRY_CNT"]
    assert env["NCCL_IB_TIMEOUT"] == "20" and keys.count("NCCL_IB_TIMEOUT") == 1  # override
    assert env["NCCL_DEBUG"] == "INFO" and env["OMP_NUM_THREADS"] == "4"
    assert chosen.settings["NCCL_DEBUG"].reason == OVERRIDE_REASON  # the node's own NCCL_*
    assert "OMP_NUM_THREADS" not in chosen.variables
    text = env_file(plan, worker, env)
    assert parse_env_file(text) == env
    assert "\nNCCL_IB_HCA==mlx5_0:1\n" in text


def test_dry_run_says_the_profile_is_detected_at_bring_up(tmp_path: Path) -> None:
    plan = build_plan(load_inventory(write_inventory(tmp_path, profile="ib")))
    text = render_up(plan)
    first, second = describe_profile("ib").splitlines()
    assert text.count(f"       {first}\n       {second}\n") == 2
    assert "NCCL_IB_HCA=" not in text  # a value needs the node's probe
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("NCCL_SOCKET_IFNAME="))
    assert lines[at + 1].strip().startswith("# + network profile ib: NCCL_IB_HCA")


def canned(answers: Mapping[str, dict[str, Any] | Reply]) -> ScriptedTransport:
    """Answers the probe with recorded facts per node (or as scripted); keeps puts."""
    transport = ScriptedTransport()
    for name, reply in answers.items():
        transport.on(name, " - probe ", reply)
    return transport


class Collect(QuietReporter):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def node(self, name: str, message: str) -> None:
        self.lines.append(f"{name}: {message}")

    def info(self, message: str) -> None:
        self.lines.append(message)


def probe_answer(fixture: str, ip: str, **network: Any) -> dict[str, Any]:
    facts = facts_of(fixture, **network)
    route = {"head_ip": "10.10.0.11", "source_ip": ip, "interface": facts["interface"]}
    return {
        "route": route,
        "network": facts,
        "rtk_pids": [],
        "raylet_running": False,
        "busy_ports": [],
    }


def test_up_writes_the_chosen_variables_into_the_env_file(tmp_path: Path) -> None:
    inv = load_inventory(write_inventory(tmp_path))
    plan = build_plan(inv)
    transport = canned(
        {"n1": probe_answer("bond", "10.10.0.11"), "n2": probe_answer("ib", "10.10.0.12")}
    )
    reporter = Collect()
    for node_plan in plan.nodes:
        outcome = NodeOutcome(node_plan.name, node_plan.role)
        assert prepare_node(node_plan, plan, transport, None, reporter, outcome) is True
    n1 = parse_env_file(transport.files[("n1", plan.paths.env_file)].decode())
    n2 = parse_env_file(transport.files[("n2", plan.paths.env_file)].decode())
    assert n1["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1" and n1["NCCL_SOCKET_IFNAME"] == "bond0"
    assert n2["NCCL_IB_HCA"] == "=mlx5_0:1" and n2["GLOO_SOCKET_IFNAME"] == "ib0"
    assert n2["NCCL_DEBUG"] == "INFO"
    assert "n1: network profile roce: auto: active RoCE port(s)" in "\n".join(reporter.lines)


def test_up_refuses_ib_on_a_node_without_it(tmp_path: Path) -> None:
    inv = load_inventory(write_inventory(tmp_path, profile="ib"))
    plan = build_plan(inv)
    transport = canned({"n2": probe_answer("ethernet", "10.10.0.12")})
    outcome = NodeOutcome("n2", "worker")
    with pytest.raises(NetEnvError, match="n2: network.profile is ib, but no InfiniBand"):
        prepare_node(plan.workers[0], plan, transport, None, Collect(), outcome)
    assert not transport.files


def test_detect_network_keeps_every_node(tmp_path: Path) -> None:
    inv = load_inventory(write_inventory(tmp_path))
    plan = build_plan(inv)
    transport = canned(
        {
            "n1": probe_answer("roce", "10.10.0.11", interface_source="head"),
            "n2": Reply(unreachable="unreachable"),
        }
    )
    report = detect_network(plan, transport)
    by_name = {n.name: n for n in report.nodes}
    assert by_name["n1"].env is not None and by_name["n1"].env.profile == "roce"
    assert report.failed == {"n2": "n2: unreachable"}
    text = render_network(report)
    assert "1/2 node(s) settled" in text
    assert "mlx5_0:1  Ethernet  ACTIVE  (LinkUp)  100 Gb/sec (4X EDR)  netdev eth0" in text
    assert "NCCL_IB_HCA==mlx5_0:1" in text and "exact (=) names" in text
    assert "error      n2: unreachable" in text
    data = json.loads(json.dumps(report.to_json()))
    assert data["nodes"][0]["detected"]["route_ports"] == ["mlx5_0:1"]
    assert data["nodes"][1]["env"] is None


def test_rendered_node_shows_bonding_and_down_ports(tmp_path: Path) -> None:
    inv = load_inventory(write_inventory(tmp_path))
    plan = build_plan(inv)
    transport = canned(
        {"n1": probe_answer("bond", "10.10.0.11"), "n2": probe_answer("ib", "10.10.0.12")}
    )
    text = render_network(detect_network(plan, transport))
    assert "bond0 is a bond (802.3ad) over eth2: ether, up, mtu 9000, 100000 Mb/s" in text
    assert "GIDs on bond0" in text and "<- backs the route" in text
    assert "mlx5_1:1  InfiniBand  DOWN  (Polling)  10 Gb/sec (4X SDR)  netdev ib1" in text
    assert "profile    ib (auto: active InfiniBand port(s) mlx5_0:1)" in text
