"""Inventory values reach shells only quoted: hostile values run nothing."""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import rtk

from toolkit.cluster.plan import build_plan, fill_env
from toolkit.cluster.plan_text import env_file
from toolkit.errors import InventoryError
from toolkit.inventory import load_inventory
from toolkit.node.facts import ray_files
from toolkit.shell import comment_text, join, parse_env_file, ray_tls_on, with_env_file


@pytest.fixture
def pwned() -> Iterator[list[Path]]:
    """Sentinel files that a successful injection would create (short paths in /tmp)."""
    tag = uuid.uuid4().hex[:6]
    paths = [Path(f"/tmp/pw{tag}{i}") for i in range(8)]
    yield paths
    for path in paths:
        path.unlink(missing_ok=True)


def hostile(path: Path) -> str:
    return f"a'; touch {path}; echo '"


def hostile_inventory(
    tmp_path: Path, pwned: list[Path], ray: str, python: str = sys.executable
) -> Path:
    temp_dir = f"/tmp/h'$(touch {pwned[0]})'"
    assert len(temp_dir) <= 48
    data = {
        "cluster": "hostile",
        "transport": "local",
        "defaults": {"python": python, "env": {"A": hostile(pwned[1])}},
        "nodes": [
            {
                "host": "localhost",
                "address": "127.0.0.1",
                "ray": ray,
                "env": {
                    "B": hostile(pwned[2]),
                    "C": f"$(touch {pwned[3]})",
                    "D": f"`touch {pwned[4]}`",
                },
                "resources": {f"r'; touch {pwned[5]}; '": 1},
            }
        ],
        "network": {
            "interface": f"eth0;touch${{IFS}}{pwned[6]}",
            "env": {"NCCL_X": f'x"; touch {pwned[7]}; "'},
        },
        "ray": {
            "temp_dir": temp_dir,
            "dashboard_host": f"127.0.0.1'; touch {pwned[0]}; '",
            "start_timeout_s": 30,
            "wait_timeout_s": 5,
        },
        "ports": {
            "gcs": 6579,
            "dashboard": 8465,
            "client_server": 6578,
            "node_manager": 6580,
            "object_manager": 6581,
            "runtime_env_agent": 6582,
            "dashboard_agent_grpc": 6583,
            "dashboard_agent_listen": 6584,
            "metrics_export": 6585,
            "min_worker": 23000,
            "max_worker": 23999,
        },
    }
    path = tmp_path / "hostile.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_quote_round_trips_through_bash(pwned: list[Path]) -> None:
    values = [hostile(pwned[0]), f"$(touch {pwned[1]})", f"`touch {pwned[2]}`", "a\nb", "", "'"]
    done = subprocess.run(
        ["bash", "-c", join(["printf", "%s\\0", *values])], capture_output=True, check=True
    )
    assert done.stdout.decode().split("\0")[:-1] == values
    assert not any(p.exists() for p in pwned)


def test_env_file_sources_to_the_exact_values(tmp_path: Path, pwned: list[Path]) -> None:
    bin_dir = f"/opt/v'$(touch {pwned[3]})'/bin"
    inv = load_inventory(hostile_inventory(tmp_path, pwned, ray="ray", python=f"{bin_dir}/python"))
    plan = build_plan(inv)
    env = fill_env(plan.head, {"node_ip": "127.0.0.1", "interface": "lo"})
    text = env_file(plan, plan.head, env)
    path = tmp_path / "node.env"
    path.write_text(text)
    assert parse_env_file(text) == env
    done = subprocess.run(
        ["bash", "-c", with_env_file(str(path), "env -0")],
        capture_output=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    seen = dict(item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)
    for key, value in env.items():
        assert seen[key] == value, key
    # The inventory's Python environment goes first on PATH, the rest kept after it.
    assert seen["PATH"] == f"{bin_dir}:/usr/bin:/bin"
    assert not any(p.exists() for p in pwned)


def test_every_plan_command_parses_to_the_intended_words(tmp_path: Path, pwned: list[Path]) -> None:
    inv = load_inventory(hostile_inventory(tmp_path, pwned, ray=f"/x'; touch {pwned[1]}; '"))
    plan = build_plan(inv)
    start = plan.head.start_command
    # The ray executable, the temp dir and the resources stay single words.
    words = shlex.split(start.split("&& exec ", 1)[1])
    assert words[0] == f"/x'; touch {pwned[1]}; '"
    assert f"--temp-dir={inv.temp_dir}" in words
    assert any(w.startswith("--resources=") and "touch" in w for w in words)


def test_up_with_hostile_values_runs_nothing(
    tmp_path: Path, pwned: list[Path], state_dir: Path
) -> None:
    path = hostile_inventory(tmp_path, pwned, ray=f"/nonexistent'; touch {pwned[1]}; '")
    inv = load_inventory(path)
    try:
        done = rtk("up", str(path), timeout=120)
        assert done.returncode == 4, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        assert "ray start exited 127" in done.stderr
        # The env file was written with the hostile values, quoted, mode 0600.
        assert not any(p.exists() for p in pwned), [p for p in pwned if p.exists()]
    finally:
        down = rtk("down", str(path), timeout=120)
    assert down.returncode == 0, down.stderr
    assert not Path(inv.temp_dir).exists()
    assert not any(p.exists() for p in pwned)


def test_a_newline_in_the_temp_dir_is_refused(tmp_path: Path) -> None:
    # It used to reach the env file's header comment, ending it: the next line ran.
    path = tmp_path / "inv.yaml"
    path.write_text(
        'cluster: c\nnodes: [{host: n1}]\nray: {temp_dir: "/tmp/x\\ntouch /tmp/y\\n#"}\n'
    )
    with pytest.raises(InventoryError, match=r"ray\.temp_dir: got .*printable characters only"):
        load_inventory(path)


def test_the_env_files_comments_stay_comments(tmp_path: Path, pwned: list[Path]) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("cluster: c\nnodes: [{host: n1}]\n")
    plan = build_plan(load_inventory(path))
    # A path no inventory passes (see above), handed to the renderer directly.
    hostile_paths = dataclasses.replace(plan.paths, temp_dir=f"/tmp/x\ntouch {pwned[0]}\n#")
    text = env_file(dataclasses.replace(plan, paths=hostile_paths), plan.head, {"A": "1"})
    file = tmp_path / "node.env"
    file.write_text(text)
    subprocess.run(["bash", "-c", with_env_file(str(file), "true")], check=True)
    assert not pwned[0].exists()
    assert "\\ntouch" in text.splitlines()[1]


def test_comment_text_escapes_what_would_end_a_line() -> None:
    assert comment_text("a\nb\rc\td\x00é") == "a\\nb\\rc\\td\\x00é"


# RAY_USE_TLS as an env file line, and whether Ray takes it for on.
TLS_LINES = [
    ("RAY_USE_TLS='1'", True),
    ("RAY_USE_TLS='true'", True),
    ("RAY_USE_TLS='TRUE'", True),
    ('RAY_USE_TLS="True"', True),
    ("RAY_USE_TLS=1", True),
    ("RAY_USE_TLS='0'", False),
    ("RAY_USE_TLS='false'", False),
    ("RAY_USE_TLS='yes'", False),  # Ray knows only 1 and true
    ("RAY_USE_TLS='on'", False),
    ("RAY_USE_TLS=''", False),
    ("RAY_USE_TLS=' 1'", False),  # quoted, the space is part of the value
    ("# RAY_USE_TLS='1'", False),  # a comment sets nothing
    ("  # RAY_USE_TLS=true", False),
    ("RAY_USE_TLS_X='1'", False),  # another variable
    ("", False),  # absent
]


@pytest.mark.parametrize(("line", "on"), TLS_LINES)
def test_ray_tls_on_reads_ray_use_tls_as_ray_does(line: str, on: bool) -> None:
    text = f"# rtk's env file\nRAY_AUTH_MODE='token'\n{line}\nRAY_NODE_IP_ADDRESS='10.0.0.1'\n"
    assert ray_tls_on(parse_env_file(text)) is on


def test_ray_tls_on_takes_the_last_setting_as_the_shell_does() -> None:
    assert ray_tls_on(parse_env_file("RAY_USE_TLS='1'\nRAY_USE_TLS='0'\n")) is False
    assert ray_tls_on(parse_env_file("RAY_USE_TLS='0'\nRAY_USE_TLS='true'\n")) is True


@pytest.mark.parametrize("line", [line for line, _ in TLS_LINES])
def test_the_node_scripts_own_tls_rule_is_the_same(tmp_path: Path, line: str) -> None:
    """``facts.py`` (stdlib only, on the nodes) keeps a copy of the rule: they agree."""
    (tmp_path / "node.crt").write_text("-----BEGIN node.crt-----\n")
    env = tmp_path / "ray.env"
    env.write_text(f"{line}\nRAY_TLS_SERVER_CERT='{tmp_path / 'node.crt'}'\n")
    found = ray_files(str(env))
    assert ("cert" in found) is ray_tls_on(parse_env_file(found["env"]))
