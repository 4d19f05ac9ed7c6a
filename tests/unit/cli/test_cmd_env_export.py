"""``rtk env --export``: shell code for Ray's own CLI, from the state here, probing no node."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import rtk

from toolkit.state.cluster_state import ClusterState
from toolkit.state.store import StateStore

# Nodes on addresses nothing answers: a probe would fail (exit 4); --export must not try.
INVENTORY = """\
cluster: exp1
nodes:
  - {host: n1, address: 10.255.255.1}
  - {host: n2, address: 10.255.255.2}
"""


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    return path


@pytest.fixture
def state(tmp_path: Path) -> dict[str, str]:
    """An rtk state directory in which exp1 was brought up (its record and token)."""
    root = tmp_path / "state"
    store = StateStore("exp1", root)
    store.token()
    store.save(ClusterState(cluster="exp1", head="n1"))
    return {"RTK_STATE_DIR": str(root), "SHELL": "/bin/bash", "RTK_INVENTORY": ""}


def test_export_prints_only_shell_lines_for_ray(inventory: Path, state: dict[str, str]) -> None:
    done = rtk("env", str(inventory), "--export", env=state)
    assert done.returncode == 0, done.stderr
    token_file = Path(state["RTK_STATE_DIR"]) / "exp1" / "auth_token"
    assert done.stdout.splitlines() == [
        "unset RAY_AUTH_TOKEN",
        # Without ray.tls, TLS variables an earlier eval left (another cluster's) go.
        "unset RAY_USE_TLS",
        "unset RAY_TLS_SERVER_CERT",
        "unset RAY_TLS_SERVER_KEY",
        "unset RAY_TLS_CA_CERT",
        "export RAY_ADDRESS=10.255.255.1:6379",
        "export RAY_API_SERVER_ADDRESS=http://10.255.255.1:8265",
        "export RAY_AUTH_MODE=token",
        f"export RAY_AUTH_TOKEN_PATH={token_file}",
        f"export RTK_INVENTORY={inventory}",
        f"export RTK_STATE_DIR={state['RTK_STATE_DIR']}",
    ]
    assert done.stderr == ""


def test_the_shell_comes_from_the_option_or_dollar_shell(
    inventory: Path, state: dict[str, str]
) -> None:
    fish = rtk("env", str(inventory), "--export", "--shell", "fish", env=state)
    assert fish.returncode == 0, fish.stderr
    assert "set -gx RAY_ADDRESS '10.255.255.1:6379';" in fish.stdout.splitlines()
    from_env = rtk("env", str(inventory), "--export", env={**state, "SHELL": "/usr/bin/fish"})
    assert from_env.stdout == fish.stdout
    zsh = rtk("env", str(inventory), "--export", env={**state, "SHELL": "/bin/zsh"})
    assert "export RAY_AUTH_MODE=token" in zsh.stdout.splitlines()


def test_the_inventory_may_come_from_rtk_inventory(inventory: Path, state: dict[str, str]) -> None:
    done = rtk("env", "--export", env={**state, "RTK_INVENTORY": str(inventory)})
    assert done.returncode == 0, done.stderr
    assert f"export RTK_INVENTORY={inventory}" in done.stdout.splitlines()


def test_a_cluster_never_brought_up_here_is_an_error_naming_rtk_up(
    inventory: Path, tmp_path: Path
) -> None:
    done = rtk("env", str(inventory), "--export", env={"RTK_STATE_DIR": str(tmp_path / "none")})
    assert done.returncode == 6
    assert done.stdout == ""
    assert "cluster 'exp1' has no state on this machine" in done.stderr
    assert f"Run `rtk up {inventory}` here first" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--export", "--json"], "--export and --json exclude each other"),
        (["--shell", "zsh"], "--shell goes with --export"),
        (["--export", "--shell", "tcsh"], "'tcsh' is not one of"),
    ],
)
def test_option_mistakes_are_usage_errors(
    inventory: Path, state: dict[str, str], args: list[str], why: str
) -> None:
    done = rtk("env", str(inventory), *args, env=state)
    assert done.returncode == 2
    assert why in done.stderr
