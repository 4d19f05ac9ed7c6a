"""``--ray-address``: Ray's ways of naming a cluster, mapped onto the clusters rtk brought up.

The clusters here are brought up for real by rtk's own flow on simulated nodes
(``toolkit.simulation``), so the records looked up are the ones ``rtk up``
writes.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from toolkit.cli import cli
from toolkit.cluster.plan import build_plan
from toolkit.errors import RtkError
from toolkit.flows import PreflightPolicy, Session
from toolkit.flows.ray_address import (
    AddressKind,
    RayAddress,
    check_address,
    find_cluster,
    known_clusters,
    parse_ray_address,
)
from toolkit.inventory import Inventory, default_inventory, load_inventory
from toolkit.simulation import LatencyModel, SimulatedCluster, SimulatedTransport
from toolkit.state.store import StateStore
from toolkit.train.config import TrainConfig

PORTS = {"gcs": 7379, "dashboard": 9265, "client_server": 9001}


def write_inventory(where: Path, name: str, subnet: str) -> Path:
    data: dict[str, Any] = {
        "cluster": name,
        "nodes": [{"host": f"{name}-{i}", "address": f"{subnet}.{i}"} for i in range(1, 4)],
        "ports": PORTS,
        "ray": {"wait_timeout_s": 20},
    }
    path = where / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def bring_up(inv: Inventory, root: Path) -> None:
    """``rtk up``'s flow on simulated nodes: it writes the cluster's record under ``root``."""
    cluster = SimulatedCluster(LatencyModel(scale=0.0))
    with Session(
        inv,
        store=StateStore(inv.name, root),
        excluded=(),
        transport_factory=lambda _: SimulatedTransport(cluster),
    ) as session:
        session.bring_up(PreflightPolicy.SKIP)


@pytest.fixture
def clusters(tmp_path: Path) -> tuple[Path, dict[str, Inventory]]:
    """Two clusters brought up from here, their records in the returned state root."""
    root = tmp_path / "state"
    found = {}
    for name, subnet in (("alpha", "10.1.0"), ("beta", "10.2.0")):
        inv = load_inventory(write_inventory(tmp_path, name, subnet))
        bring_up(inv, root)
        found[name] = inv
    return root, found


# ---- the forms Ray takes ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "host", "port"),
    [
        ("10.0.0.1:6379", AddressKind.GCS, "10.0.0.1", 6379),
        ("head-node:7379", AddressKind.GCS, "head-node", 7379),
        ("ray://10.0.0.1:10001", AddressKind.CLIENT, "10.0.0.1", 10001),
        ("ray://10.0.0.1", AddressKind.CLIENT, "10.0.0.1", 10001),
        ("ray://[fd00::1]:10002", AddressKind.CLIENT, "fd00::1", 10002),
        ("http://127.0.0.1:8265", AddressKind.DASHBOARD, "127.0.0.1", 8265),
        ("http://head", AddressKind.DASHBOARD, "head", 8265),
        ("https://head:443/", AddressKind.DASHBOARD, "head", 443),
    ],
)
def test_addresses_parse_to_the_head_they_name(
    text: str, kind: AddressKind, host: str, port: int
) -> None:
    assert parse_ray_address(text) == RayAddress(kind, text, host, port)


def test_auto_is_any_case() -> None:
    assert parse_ray_address("auto").kind is AddressKind.AUTO
    assert parse_ray_address(" AUTO ").kind is AddressKind.AUTO


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("10.0.0.1", "a GCS address needs its port"),
        ("grpc://h:1", "unknown scheme 'grpc://'"),
        ("ray://:10001", "no host"),
        ("h:port", "Port could not be cast"),
        ("http://h:8265/api/jobs", "only HOST:PORT may follow the scheme"),
        ("", "no host"),
        ("0\n://h:1", "unknown scheme '0\\n://'"),  # one line, whatever the text
    ],
)
def test_other_text_is_refused_with_the_forms_listed(text: str, why: str) -> None:
    with pytest.raises(RtkError) as raised:
        parse_ray_address(text)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"--ray-address {text!r}: ")
    assert why in message
    assert "give auto, HOST:PORT (the head's GCS), ray://HOST:PORT" in message


# ---- an address and the inventory given ---------------------------------------------------


def test_an_address_must_be_the_inventorys_head(tmp_path: Path) -> None:
    plan = build_plan(load_inventory(write_inventory(tmp_path, "alpha", "10.1.0")))
    for text in (
        "auto",
        "10.1.0.1:7379",
        "alpha-1:7379",
        "ray://10.1.0.1:9001",
        "http://10.1.0.1:9265",
    ):
        check_address(parse_ray_address(text), plan)
    for text in (
        "10.1.0.2:7379",  # a worker
        "10.1.0.1:6379",  # Ray's default port, not this cluster's
        "ray://10.1.0.1:10001",
        "http://10.1.0.1:8265",
        "10.1.0.1:9001",  # the client port given as a GCS address
    ):
        with pytest.raises(RtkError) as raised:
            check_address(parse_ray_address(text), plan)
        assert str(raised.value).startswith(
            f"--ray-address {text} is not the head of cluster 'alpha' ("
        )
        assert "at 10.1.0.1:7379, ray://10.1.0.1:9001 or http://10.1.0.1:9265" in str(raised.value)


# ---- no inventory: the clusters brought up from here --------------------------------------


def test_an_address_finds_the_cluster_brought_up_there(
    clusters: tuple[Path, dict[str, Inventory]],
) -> None:
    root, inventories = clusters
    for text, name in (
        ("10.2.0.1:7379", "beta"),
        ("ray://10.1.0.1:9001", "alpha"),
        ("http://10.2.0.1:9265", "beta"),
        ("beta-1:7379", "beta"),
    ):
        found = find_cluster(parse_ray_address(text), root=root)
        assert found is not None and found.name == name, text
        assert found.source == inventories[name].source


def test_an_address_no_cluster_has_lists_those_known(
    clusters: tuple[Path, dict[str, Inventory]],
) -> None:
    root, _ = clusters
    with pytest.raises(RtkError) as raised:
        find_cluster(parse_ray_address("ray://10.9.9.9:10001"), root=root)
    lines = str(raised.value).splitlines()
    assert lines[0] == (
        "--ray-address ray://10.9.9.9:10001: no cluster brought up from this machine has "
        "its head there (ray client address 10.9.9.9:10001)."
    )
    assert lines[1:3] == [
        "Clusters rtk knows here:",
        "  alpha: 10.1.0.1:7379, ray://10.1.0.1:9001 or http://10.1.0.1:9265",
    ]
    assert lines[3].startswith("  beta: 10.2.0.1:7379")
    assert "never over Ray Client" in lines[-1]
    assert "rtk train INVENTORY" in lines[-1]


def test_auto_is_the_cluster_at_ray_address(
    clusters: tuple[Path, dict[str, Inventory]],
) -> None:
    root, _ = clusters
    auto = parse_ray_address("auto")
    found = find_cluster(auto, "10.1.0.1:7379", root=root)
    assert found is not None and found.name == "alpha"
    with pytest.raises(RtkError, match=r"^RAY_ADDRESS \(which --ray-address auto reads\): "):
        find_cluster(auto, "10.1.0.1", root=root)


def test_auto_without_ray_address_is_the_local_cluster_when_it_is_up(tmp_path: Path) -> None:
    root = tmp_path / "state"
    auto = parse_ray_address("auto")
    assert find_cluster(auto, None, root=root) is None
    assert find_cluster(auto, "auto", root=root) is None  # Ray's own "no address"
    bring_up(default_inventory(), root)
    found = find_cluster(auto, "", root=root)
    assert found is not None and found.name == "local"
    # The local cluster is a known cluster too: by its own address.
    by_address = find_cluster(parse_ray_address("127.0.0.1:6479"), root=root)
    assert by_address is not None and by_address.name == "local"


def test_a_cluster_whose_inventory_is_gone_is_skipped_and_said(
    clusters: tuple[Path, dict[str, Inventory]], tmp_path: Path
) -> None:
    root, _ = clusters
    (tmp_path / "beta.yaml").unlink()
    plans, unreadable = known_clusters(root)
    assert [p.inventory.name for p in plans] == ["alpha"]
    assert len(unreadable) == 1 and unreadable[0].startswith(
        "beta: its inventory cannot be read here ("
    )
    with pytest.raises(RtkError) as raised:
        find_cluster(parse_ray_address("10.2.0.1:7379"), root=root)
    assert "  (skipped beta: its inventory cannot be read here (" in str(raised.value)


# ---- rtk train --------------------------------------------------------------------------


def _train(*args: str) -> Result:
    return CliRunner().invoke(cli, ["train", "--dry-run", *args])


def _config(output: str) -> TrainConfig:
    line = next(x for x in output.splitlines() if "entrypoint: " in x)
    entrypoint = shlex.split(line.split("entrypoint: ", 1)[1])
    return TrainConfig.from_json(json.loads(entrypoint[3]))


def test_train_finds_its_cluster_by_address_or_rtk_inventory(
    clusters: tuple[Path, dict[str, Inventory]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, inventories = clusters
    monkeypatch.setenv("RTK_STATE_DIR", str(root))
    monkeypatch.delenv("RTK_INVENTORY", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    done = _train("--ray_address", "ray://10.2.0.1:9001")
    assert done.exit_code == 0, done.output
    assert done.output.startswith("cluster 'beta': 3 node(s), head beta-1\n")
    monkeypatch.setenv("RAY_ADDRESS", "10.1.0.1:7379")
    assert _train().output.startswith("cluster 'alpha': ")
    # RTK_INVENTORY wins over RAY_ADDRESS: it names the inventory itself.
    monkeypatch.setenv("RTK_INVENTORY", inventories["beta"].source)
    assert _train("--ray_address", "auto").output.startswith("cluster 'beta': ")
    # ... and an address that is not its head is refused before anything runs.
    done = _train("--ray_address", "10.1.0.1:7379")
    assert done.exit_code == 1
    assert "is not the head of cluster 'beta'" in str(done.exception)


def test_train_with_nothing_to_find_asks_for_an_inventory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RTK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("RTK_INVENTORY", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    done = _train("--ray_address", "auto")
    assert done.exit_code == 2
    assert "give an inventory file (see inventory.example.yaml), set RTK_INVENTORY" in (done.output)


def test_the_seed_command_line_trains_on_the_rtk_inventory_cluster(
    clusters: tuple[Path, dict[str, Inventory]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, inventories = clusters
    monkeypatch.setenv("RTK_STATE_DIR", str(root))
    monkeypatch.setenv("RTK_INVENTORY", inventories["alpha"].source)
    done = _train(
        *("--model_size", "350M", "--batch_size", "2", "--gradient_accumulation_steps", "4"),
        *("--precision", "bf16", "--max_steps", "2000", "--num_workers", "0"),
        *("--resources_per_worker", '{"GPU": 1, "CPU": 4}', "--ray_address", "auto"),
        *("--save_steps", "500"),
    )
    assert done.exit_code == 0, done.output
    assert done.output.startswith("cluster 'alpha': 3 node(s), head alpha-1\n")
    config = _config(done.output)
    assert (config.model_size, config.batch_size, config.gradient_accumulation_steps) == (
        "350M",
        2,
        4,
    )
    assert (config.precision, config.max_steps, config.save_steps) == ("bf16", 2000, 500)
    assert config.num_workers == 0
    assert config.resources_per_worker == {"GPU": 1.0, "CPU": 4.0}
