"""``rtk shell``: which node, the ssh line it runs, and a real local session's status."""

from __future__ import annotations

import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from conftest import rtk

from toolkit.cli import cli
from toolkit.cli.cmd_shell import pick_node
from toolkit.inventory import load_inventory


def write_inventory(tmp_path: Path, count: int, name: str = "inv.yaml") -> Path:
    path = tmp_path / name
    nodes = "".join(f"  - {{host: gpu{i:02d}, address: 10.9.0.{i}}}\n" for i in range(1, count + 1))
    path.write_text(
        f"cluster: sh1\nhead: gpu02\ndefaults:\n  ssh: {{user: alice, port: 2222}}\nnodes:\n{nodes}"
    )
    return path


def shell(*args: str, env: dict[str, str] | None = None) -> Result:
    """``rtk shell ARGS`` in this process (only what does not exec: --dry-run, errors)."""
    return CliRunner().invoke(cli, ["shell", *args], env={"RTK_INVENTORY": "", **(env or {})})


def remote_script(dry_run_stdout: str) -> str:
    """The bash script of a printed ssh line: its last word is ``bash ... -c SCRIPT``."""
    remote = shlex.split(dry_run_stdout)[-1]
    words = shlex.split(remote)
    assert words[:4] == ["bash", "--norc", "--noprofile", "-c"]
    return words[4]


def test_the_head_is_the_default_node_and_node_picks_another(tmp_path: Path) -> None:
    inv = load_inventory(write_inventory(tmp_path, 3))
    assert pick_node(inv, None).name == "gpu02"
    assert pick_node(inv, "gpu03").address == "10.9.0.3"


def test_an_unknown_node_lists_the_names(tmp_path: Path) -> None:
    inv = load_inventory(write_inventory(tmp_path, 3))
    with pytest.raises(click.UsageError) as raised:
        pick_node(inv, "gpu9")
    assert "no node 'gpu9'" in raised.value.message
    assert "its 3 node(s): gpu01, gpu02, gpu03 (the head, gpu02" in raised.value.message


def test_an_unknown_node_among_many_lists_them_as_a_hostlist(tmp_path: Path) -> None:
    inv = load_inventory(write_inventory(tmp_path, 12))
    with pytest.raises(click.UsageError) as raised:
        pick_node(inv, "gpu13")
    assert "its 12 node(s): gpu[01-12] (" in raised.value.message


def test_unknown_node_on_the_command_line_is_a_usage_error(tmp_path: Path) -> None:
    done = shell(str(write_inventory(tmp_path, 3)), "nope", "--dry-run")
    assert done.exit_code == 2
    assert "no node 'nope'" in done.output and "gpu01, gpu02, gpu03" in done.output


def test_dry_run_prints_the_ssh_line_to_the_head_with_the_command(tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path, 3)
    done = shell(str(inventory), "--dry-run", "--", "ray", "job", "logs", "it's -f")
    assert done.exit_code == 0, done.output
    argv = shlex.split(done.stdout)
    assert argv[:2] == ["ssh", "-T"]  # no terminal here: stdin is not one
    assert argv[-7:-2] == ["-p", "2222", "-l", "alice", "--"]
    assert argv[-2] == "10.9.0.2"
    script = remote_script(done.stdout)
    assert "export RAY_ADDRESS=10.9.0.2:6379" in script.splitlines()
    assert script.splitlines()[-1] == "exec ray job logs 'it'\"'\"'s -f'"
    alias = CliRunner().invoke(
        cli, ["ssh", str(inventory), "--dry-run", "--", "ray", "job", "logs", "it's -f"]
    )
    assert alias.stdout == done.stdout


def test_without_a_command_the_session_is_the_users_shell(tmp_path: Path) -> None:
    done = shell(str(write_inventory(tmp_path, 3)), "gpu03", "--dry-run")
    assert done.exit_code == 0, done.output
    assert shlex.split(done.stdout)[-2] == "10.9.0.3"
    assert remote_script(done.stdout).splitlines()[-1] == 'exec "${SHELL:-/bin/bash}" -i'


def test_with_rtk_inventory_set_the_one_word_is_the_node(tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path, 3)
    done = shell("gpu01", "--dry-run", env={"RTK_INVENTORY": str(inventory)})
    assert done.exit_code == 0, done.output
    assert shlex.split(done.stdout)[-2] == "10.9.0.1"


def test_nothing_after_the_dashes_is_a_usage_error(tmp_path: Path) -> None:
    done = shell(str(write_inventory(tmp_path, 3)), "--")
    assert done.exit_code == 2
    assert "nothing after --" in done.output


@pytest.fixture
def local_cluster(tmp_path: Path) -> Iterator[Path]:
    """A local inventory whose env file exists, as after rtk up (Ray's temp dir is short)."""
    temp_dir = Path(tempfile.mkdtemp(prefix="rtk-sh-"))
    (temp_dir / "rtk").mkdir()
    (temp_dir / "rtk" / "node.env").write_text("RTK_NODE='localhost'\nNCCL_DEBUG='WARN'\n")
    path = tmp_path / "local.yaml"
    path.write_text(
        "cluster: shlocal\ntransport: local\nnodes:\n  - host: localhost\n"
        f"    address: 127.0.0.1\nray:\n  temp_dir: {temp_dir}\n"
    )
    yield path
    shutil.rmtree(temp_dir)


def test_a_local_session_runs_here_with_the_env_and_exits_with_the_command_status(
    local_cluster: Path,
) -> None:
    show = "import os; print(os.environ['RTK_NODE'], os.environ['NCCL_DEBUG'], os.environ['RAY_ADDRESS'], os.environ['RAY_AUTH_MODE']); raise SystemExit(7)"
    done = rtk("shell", str(local_cluster), "--", sys.executable, "-c", show)
    assert done.returncode == 7
    assert done.stdout.split() == ["localhost", "WARN", "127.0.0.1:6379", "token"]
    assert done.stderr == ""
