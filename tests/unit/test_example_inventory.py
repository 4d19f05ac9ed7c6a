"""inventory.example.yaml: it validates, resolves as documented, and shows every key."""

from __future__ import annotations

import re
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from conftest import REPO
from pydantic import BaseModel

from toolkit.inventory import Container, Inventory, InventorySpec, load_inventory

ROOT = REPO
EXAMPLE = ROOT / "inventory.example.yaml"


@pytest.fixture(scope="module")
def inv() -> Inventory:
    return load_inventory(EXAMPLE)


@pytest.fixture(scope="module")
def text() -> str:
    return EXAMPLE.read_text(encoding="utf-8")


# --- (a) what the example resolves to ---------------------------------------------


def test_cluster_level_facts(inv: Inventory) -> None:
    assert inv.name == "demo"
    assert inv.transport == "ssh"
    assert inv.head_name == "gpu01"
    assert inv.min_nodes == 3
    assert inv.temp_dir == "/tmp/rtk-demo"
    assert inv.dashboard_host == "10.10.0.11"


def test_host_range_expands_with_paired_addresses(inv: Inventory) -> None:
    assert [(n.name, n.address) for n in inv.nodes] == [
        ("gpu01", "10.10.0.11"),
        ("gpu02", "10.10.0.12"),
        ("gpu03", "10.10.0.13"),
        ("gpu04", "10.10.0.14"),
    ]
    assert inv.head.name == "gpu01"
    assert [n.name for n in inv.workers] == ["gpu02", "gpu03", "gpu04"]


def test_every_address_is_private(inv: Inventory) -> None:
    for node in inv.nodes:
        assert node.address.startswith("10."), node
    assert inv.head.ssh.jump_host is not None
    assert "@10." in inv.head.ssh.jump_host


def test_gpus_cpus_and_resources(inv: Inventory) -> None:
    assert {n.name: n.gpus for n in inv.nodes} == {
        "gpu01": 4,
        "gpu02": 8,
        "gpu03": 8,
        "gpu04": 8,
    }
    assert {n.name: n.cpus for n in inv.nodes} == {
        "gpu01": 32,
        "gpu02": 96,
        "gpu03": 96,
        "gpu04": 96,
    }
    assert dict(inv.head.resources) == {"head_node": 1.0}
    for worker in inv.workers:
        assert dict(worker.resources) == {"nvlink": 1.0}


def test_head_overrides_replace_defaults(inv: Inventory) -> None:
    head = inv.head
    assert head.ssh.user == "admin"
    assert head.python == "/opt/conda/envs/ray/bin/python"
    assert head.ray == ("/opt/conda/envs/ray/bin/ray",)
    # The node's env is merged over defaults.env: its own value wins, the rest stays.
    assert dict(head.env) == {"OMP_NUM_THREADS": "4", "HF_HOME": "/scratch/hf-cache"}


def test_workers_inherit_defaults(inv: Inventory) -> None:
    for worker in inv.workers:
        assert worker.ssh.user == "rtk"
        assert worker.python == "/opt/rtk/venv/bin/python"
        assert worker.ray == ("/opt/rtk/venv/bin/ray",)
        assert dict(worker.env) == {"OMP_NUM_THREADS": "8", "HF_HOME": "/scratch/hf-cache"}


def test_every_node_runs_ray_in_the_defaults_container(inv: Inventory) -> None:
    for node in inv.nodes:
        assert node.container == Container(
            runtime="podman",
            image="localhost/rtk-ray:2.60",
            mounts=("/scratch:/scratch", "/etc/pki:/etc/pki:ro"),
            options=("--security-opt", "label=disable"),
            gpus="auto",
            shm_size_bytes=16 * 1024**3,
        )
        assert node.container.wants_gpus(node.gpus)


def test_ssh_defaults_reach_every_node(inv: Inventory) -> None:
    for node in inv.nodes:
        assert node.ssh.port == 22
        assert node.ssh.jump_host == "rtk@10.10.0.2:22"
        assert node.ssh.connect_timeout_s == 15.0
        assert node.ssh.accept_new_host_keys is False
        assert node.ssh.key_file is None


def test_network_ports_ray_and_slurm(inv: Inventory) -> None:
    assert inv.network.profile == "ib"
    assert inv.network.interface == "eth0"
    assert dict(inv.network.env) == {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_DEBUG": "WARN"}
    assert inv.ports.gcs == 6379
    assert inv.ports.dashboard == 8265
    assert (inv.ports.min_worker, inv.ports.max_worker) == (10002, 19999)
    assert inv.ray.object_store_memory == 20_000_000_000
    assert inv.ray.include_dashboard is True
    assert inv.ray.auth == "token"
    assert (inv.ray.start_timeout_s, inv.ray.wait_timeout_s) == (120, 300)
    assert inv.slurm.partition == "gpu"
    assert inv.slurm.account == "ml-research"
    assert inv.slurm.time == "04:00:00"
    assert (inv.slurm.nodes, inv.slurm.gpus_per_node) == (4, 8)
    assert inv.slurm.job_name == "rtk-demo"


# --- (b) the example shows every key of the schema --------------------------------


def _submodels(annotation: Any) -> Iterator[type[BaseModel]]:
    """The BaseModel classes inside a field's annotation (X | None, list[X], ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from _submodels(typing.get_args(annotation)[0])
        return
    if origin is not None or isinstance(annotation, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from _submodels(arg)


def _all_models(root: type[BaseModel]) -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []
    pending = [root]
    while pending:
        model = pending.pop(0)
        if model in seen:
            continue
        seen.append(model)
        for field in model.model_fields.values():
            pending.extend(_submodels(field.annotation))
    return seen


def _key_pattern(name: str) -> re.Pattern[str]:
    # A key as written in the file, set or commented out: "name:", "- name:", "# name:".
    return re.compile(rf"^[ \t]*(?:#[ \t]*)?(?:-[ \t]+)?{re.escape(name)}:", re.MULTILINE)


def _commented_out(text: str, name: str) -> bool:
    return re.search(rf"^[ \t]*#[ \t]*{re.escape(name)}:", text, re.MULTILINE) is not None


def test_model_walk_finds_every_model() -> None:
    names = {m.__name__ for m in _all_models(InventorySpec)}
    assert {
        "InventorySpec",
        "NodeSettings",
        "NodeSpec",
        "SshSettings",
        "NetworkSettings",
        "PortSettings",
        "RaySettings",
        "SlurmSettings",
        "ContainerSettings",
    } <= names


def test_every_schema_key_appears_in_example(text: str) -> None:
    missing = sorted(
        f"{model.__name__}.{name}"
        for model in _all_models(InventorySpec)
        for name in model.model_fields
        if not _key_pattern(name).search(text)
    )
    assert not missing, f"inventory.example.yaml does not show: {', '.join(missing)}"


def _walk_sections(
    model: type[BaseModel],
    sections: list[dict[str, Any]],
    where: str,
    visited: set[type[BaseModel]],
) -> Iterator[tuple[str, str, list[dict[str, Any]]]]:
    """Yield (where, field, sections holding it) for each model at its first place."""
    if model in visited:
        return
    visited.add(model)
    # Fields a visited base model declares were checked at that model's own place
    # (NodeSpec's inherited python/venv/... under defaults:).
    inherited: set[str] = set()
    for base in model.__mro__[1:]:
        if base in visited:
            inherited |= set(base.model_fields)
    for name, field in model.model_fields.items():
        if name in inherited:
            continue
        yield where, name, sections
        children: list[dict[str, Any]] = []
        for section in sections:
            value = section.get(name)
            values = value if isinstance(value, list) else [value]
            children.extend(v for v in values if isinstance(v, dict))
        for sub in _submodels(field.annotation):
            yield from _walk_sections(sub, children, f"{where}{name}.", visited)


def test_every_key_sits_in_its_own_section(text: str) -> None:
    data = yaml.safe_load(text)
    missing = [
        f"{where}{name}"
        for where, name, sections in _walk_sections(InventorySpec, [data], "", set())
        if not any(name in section for section in sections) and not _commented_out(text, name)
    ]
    assert not missing, f"inventory.example.yaml lacks, in their sections: {', '.join(missing)}"


def test_commented_out_keys_are_only_those_that_cannot_be_set(text: str) -> None:
    field_names = {name for m in _all_models(InventorySpec) for name in m.model_fields}
    commented = {name for name in field_names if _commented_out(text, name)}
    # ssh.key must name an existing file; python beside defaults.venv is rejected.
    assert commented == {"key", "python"}


# --- (c) the CLI accepts it -------------------------------------------------------


def test_rtk_inventory_check_accepts_example() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "toolkit", "inventory", "check", str(EXAMPLE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cluster demo" in result.stdout
    assert "4 node(s)" in result.stdout
    for host in ("gpu01", "gpu02", "gpu03", "gpu04"):
        assert host in result.stdout
