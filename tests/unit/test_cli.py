"""The command line as users meet it: help, usage errors, schema, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import rtk


def test_help_lists_the_commands() -> None:
    done = rtk("--help")
    assert done.returncode == 0
    for command in ("demo", "inventory", "up", "status", "down"):
        assert f"  {command}" in done.stdout
    assert "rtk up inv.yaml --dry-run" in done.stdout


def test_up_help_teaches_by_example() -> None:
    done = rtk("up", "--help")
    assert done.returncode == 0
    assert "--dry-run" in done.stdout and "--local" in done.stdout
    assert "rtk up --local" in done.stdout


def test_version() -> None:
    done = rtk("--version")
    assert done.returncode == 0 and done.stdout.startswith("rtk, version ")


def test_no_inventory_is_a_usage_error(monkeypatch: object) -> None:
    done = rtk("up", "--dry-run", env={"RTK_INVENTORY": ""})
    assert done.returncode == 2
    assert "give an inventory file" in done.stderr
    assert "Traceback" not in done.stderr


def test_inventory_and_local_together_is_a_usage_error(tmp_path: Path) -> None:
    done = rtk("status", str(tmp_path / "x.yaml"), "--local")
    assert done.returncode == 2
    assert "not both" in done.stderr


def test_missing_inventory_file_is_one_line(tmp_path: Path) -> None:
    done = rtk("up", str(tmp_path / "nope.yaml"), "--dry-run")
    assert done.returncode == 3
    assert done.stderr.strip() == f"rtk: {tmp_path / 'nope.yaml'}: no such file"


def test_rtk_inventory_variable_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("cluster: viaenv\nnodes:\n  - host: gpu01\n")
    done = rtk("up", "--dry-run", env={"RTK_INVENTORY": str(path)})
    assert done.returncode == 0, done.stderr
    assert "cluster 'viaenv'" in done.stdout


def test_unreachable_head_is_a_clear_status(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(
        "cluster: remote\nnodes:\n  - host: gpu01\n    address: 127.0.0.1\n"
        "defaults:\n  ssh: {port: 1, connect_timeout_s: 3}\n"
    )
    done = rtk("status", str(path))
    assert done.returncode == 1
    assert "gpu01: cannot connect to" in done.stdout
    assert "127.0.0.1:1" in done.stdout
    assert "Traceback" not in done.stderr


def test_schema_is_json_schema_with_every_section() -> None:
    done = rtk("inventory", "schema")
    assert done.returncode == 0
    schema = json.loads(done.stdout)
    assert schema["title"] == "rtk inventory"
    assert set(schema["required"]) == {"cluster", "nodes"}
    for section in ("defaults", "nodes", "network", "ports", "ray", "slurm", "head", "min_nodes"):
        assert section in schema["properties"]
    assert schema["additionalProperties"] is False


def test_check_prints_resolved_nodes(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(
        "cluster: c1\ndefaults:\n  ssh: {user: u, port: 2222}\n"
        "nodes:\n  - host: n[1-2]\n    address: 10.9.0.[1-2]\n    gpus: 4\n"
    )
    done = rtk("inventory", "check", str(path))
    assert done.returncode == 0, done.stderr
    assert "ok: cluster c1, 2 node(s), head n1, transport ssh, min_nodes 2" in done.stdout
    assert "n2               u@10.9.0.2:2222  gpus=4" in done.stdout
    data = json.loads(rtk("inventory", "check", str(path), "--json").stdout)
    assert [n["address"] for n in data["nodes"]] == ["10.9.0.1", "10.9.0.2"]
